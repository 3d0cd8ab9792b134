"""schemathesis hooks of scripts/schemathesis.sh.

stockd reads integer fields as JSON integers only: `5.0` or `1e3` where an integer is expected is a
wrong type, 422 invalid_request (docs/api.md, "JSON"; the OpenAPI document says so in its
description). JSON Schema cannot express that (it counts a whole float such as `5.0` as an
integer), and schemathesis spells some generated integers that way in JSON bodies. This hook
writes whole floats back as the integers they stand for, in every generated body; real fractions
such as `5.5` are left alone, so no schema-violating body becomes a valid one.
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


@schemathesis.hook
def map_body(context, body):
    return _whole_floats_as_integers(body)
