"""The scenario of scripts/generated-clients.sh, through a client that openapi-python-client
generated from the server's own /openapi.json (the package `stockd_api`, on PYTHONPATH).

Usage: scenario.py BASE_URL TOKEN PREFIX

Every call uses the generated functions and models as a user would, optional arguments left to
their defaults (confirm and release take no body argument at all). Each step prints one line of
the transcript that the script compares with scripts/generated-clients/expected.txt, the same
file the TypeScript scenario is held to; ids are written without PREFIX. Any answer that the
generated code cannot parse into its documented model fails the step.
"""

import sys

from stockd_api import AuthenticatedClient
from stockd_api.api.batch import batch
from stockd_api.api.events import events
from stockd_api.api.holds import confirm_hold, refund_hold, release_hold, reserve
from stockd_api.api.pools import get_pool, put_pool
from stockd_api.models import (
    BatchBody,
    BatchResponse,
    ConfirmOp,
    ErrorBody,
    EventPage,
    ExtendOp,
    HoldBody,
    HoldItem,
    HoldObject,
    PoolBody,
    PoolObject,
    RefundBody,
    RefundOp,
    ReleaseOp,
    ReserveOp,
    UserLimitExceededError,
)
from stockd_api.types import UNSET

BASE_URL, TOKEN, PREFIX = sys.argv[1:4]
client = AuthenticatedClient(base_url=BASE_URL, token=TOKEN, raise_on_unexpected_status=True)
POOL = f"{PREFIX}pool"


def short(identifier):
    return identifier.removeprefix(PREFIX)


def parsed(response, model):
    if not isinstance(response.parsed, model):
        raise SystemExit(
            f"{response.status_code}: expected a {model.__name__}, got {response.parsed!r}: "
            f"{response.content!r}"
        )
    return response.parsed


def pool_line(step, response):
    pool = parsed(response, PoolObject)
    print(
        f"{step} {response.status_code} total={pool.total} available={pool.available} "
        f"held={pool.held} sold={pool.sold}"
    )


def hold_line(step, response):
    hold = parsed(response, HoldObject)
    print(f"{step} {short(hold.hold_id)} {response.status_code} {hold.status.value}")
    return hold


def take(hold_id, user, qty):
    return HoldBody(hold_id=PREFIX + hold_id, user=user, items=[HoldItem(pool=POOL, qty=qty)])


# A pool with a per-user limit.
pool_line(
    "put_pool",
    put_pool.sync_detailed(POOL, client=client, body=PoolBody(total=5, per_user_limit=2)),
)

# Reserve with ttl_ms, confirm and wait_ms left out: the server's defaults apply.
hold = hold_line("reserve", reserve.sync_detailed(client=client, body=take("h1", "ann", 2)))
print(f"ttl_ms {hold.expires_at_ms - hold.created_at_ms}")

# The user's limit: a 409 parsed into its own error model.
refused = reserve.sync_detailed(client=client, body=take("h2", "ann", 1))
error = parsed(refused, UserLimitExceededError)
print(
    f"reserve h2 {refused.status_code} {error.error.value} limit={error.limit} "
    f"used={error.used} requested={error.requested}"
)

# Confirm and release with default arguments (no body).
hold_line("confirm", confirm_hold.sync_detailed(PREFIX + "h1", client=client))
hold_line("reserve", reserve.sync_detailed(client=client, body=take("h3", "bob", 1)))
hold_line("release", release_hold.sync_detailed(PREFIX + "h3", client=client))

# Refund with the body the document now names.
hold_line(
    "refund",
    refund_hold.sync_detailed(PREFIX + "h1", client=client, body=RefundBody(restock=False)),
)
pool_line("get_pool", get_pool.sync_detailed(POOL, client=client))

# A batch of typed ops, and one value that is not an op: its result is its own 422.
ops = [
    ReserveOp(
        op="reserve",
        hold_id=PREFIX + "h4",
        user="cid",
        items=[HoldItem(pool=POOL, qty=1)],
        confirm=True,
    ),
    ConfirmOp(op="confirm", hold_id=PREFIX + "h4"),
    RefundOp(op="refund", hold_id=PREFIX + "h4", restock=False),
    ReleaseOp(op="release", hold_id=PREFIX + "h5"),
    ExtendOp(op="extend", hold_id=PREFIX + "h4", ttl_ms=5),
    {"op": "nope"},
]
answer = batch.sync_detailed(client=client, body=BatchBody(ops=ops))
results = []
for result in parsed(answer, BatchResponse).results:
    if isinstance(result.body, HoldObject):
        results.append(f"{result.status}:{result.body.status.value}")
    elif isinstance(result.body, ErrorBody):
        results.append(f"{result.status}:{result.body.error}")
    else:
        raise SystemExit(f"a batch result of no documented type: {result!r}")
print(f"batch {answer.status_code} {' '.join(results)}")
pool_line("get_pool", get_pool.sync_detailed(POOL, client=client))

# The feed, read from the start: this scenario's events, in order.
page = parsed(events.sync_detailed(client=client, limit=1000), EventPage)
mine = []
for event in page.events:
    if event.pool == POOL or (event.hold_id is not UNSET and event.hold_id.startswith(PREFIX)):
        name = event.type_.value
        mine.append(f"{name}:{short(event.hold_id)}" if event.hold_id is not UNSET else name)
print(f"events {' '.join(mine)}")
