"""schemathesis hooks of scripts/schemathesis.sh.

stockd reads integer fields as JSON integers only: `5.0` or `1e3` where an integer is expected is a
wrong type, 422 invalid_request (docs/api.md, "JSON"; the OpenAPI document says so in its
description). JSON Schema cannot express that (it counts a whole float such as `5.0` as an
integer), and schemathesis spells some generated integers that way in JSON bodies. This hook
writes whole floats back as the integers they stand for, in every generated body; real fractions
such as `5.5` are left alone, so no schema-violating body becomes a valid one.

A hold's items must name distinct pools (422 otherwise, docs/api.md). JSON Schema can say only
that items are not identical (`uniqueItems`), so schemathesis may generate two items of one pool
with different quantities as "valid". The second hook drops such a later item (never an identical
one, which is the schema's own violation), in reserve bodies and in batch reserve ops.

The bodies of confirm, release and refund are optional, and a `null` body is the same as none
(docs/api.md). The document says so in words, not in the schema: a body schema that admits `null`
(`oneOf: [null, object]`) is what made generated clients send their default argument as the body
and crash (issue 27). The third hook drops generated `null` bodies of those operations, which
schemathesis would otherwise send as invalid data that the server rightly accepts.
"""

import schemathesis


def _whole_floats_as_integers(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_whole_floats_as_integers(item) for item in value]
    if isinstance(value, dict):
        return {key: _whole_floats_as_integers(item) for key, item in value.items()}
    return value


def _distinct_pools(value):
    if isinstance(value, list):
        return [_distinct_pools(item) for item in value]
    if not isinstance(value, dict):
        return value
    value = {key: _distinct_pools(item) for key, item in value.items()}
    items = value.get("items")
    if isinstance(items, list):
        kept, seen = [], {}
        for item in items:
            pool = item.get("pool") if isinstance(item, dict) else None
            if isinstance(pool, str) and pool in seen and seen[pool] != item:
                continue  # same pool, different item: what the schema cannot express
            if isinstance(pool, str):
                seen.setdefault(pool, item)
            kept.append(item)
        value["items"] = kept
    return value


@schemathesis.hook
def map_body(context, body):
    return _distinct_pools(_whole_floats_as_integers(body))


# The operations whose optional body may be `null` (the same as no body).
_NULL_AS_NO_BODY = {"confirm_hold", "release_hold", "refund_hold"}


@schemathesis.hook
def filter_body(context, body):
    operation = context.operation
    if operation is not None and operation.definition.raw.get("operationId") in _NULL_AS_NO_BODY:
        return body is not None
    return True
