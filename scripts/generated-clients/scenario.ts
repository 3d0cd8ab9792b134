// The scenario of scripts/generated-clients.sh, through openapi-fetch typed by openapi-typescript
// from the server's own /openapi.json (./stockd-api.d.ts, generated beside this file). It must
// type-check under `tsc --strict` as written: a reserve passes only hold_id, user and items
// (ttl_ms, confirm and wait_ms are optional), confirm and release pass no body.
//
// Usage: node scenario.js BASE_URL TOKEN PREFIX
//
// Each step prints one line of the transcript that the script compares with
// scripts/generated-clients/expected.txt, the file the Python scenario is held to too; ids are
// written without PREFIX.

import createClient from "openapi-fetch";
import type { components, paths } from "./stockd-api.js";

type Schemas = components["schemas"];

function argument(index: number): string {
  const value = process.argv[2 + index];
  if (value === undefined) {
    throw new Error("usage: node scenario.js BASE_URL TOKEN PREFIX");
  }
  return value;
}
const [baseUrl, token, prefix] = [argument(0), argument(1), argument(2)];
const client = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${token}` } });
const pool = `${prefix}pool`;

const short = (id: string): string => (id.startsWith(prefix) ? id.slice(prefix.length) : id);

/** The documented success body, or a failure naming what came instead. */
function ok<T>(answer: { data?: T; error?: unknown; response: Response }): T {
  if (answer.data === undefined) {
    throw new Error(`${answer.response.status}: ${JSON.stringify(answer.error)}`);
  }
  return answer.data;
}

function poolLine(step: string, status: number, body: Schemas["PoolObject"]): void {
  console.log(
    `${step} ${status} total=${body.total} available=${body.available} held=${body.held} sold=${body.sold}`,
  );
}

function holdLine(step: string, status: number, hold: Schemas["HoldObject"]): Schemas["HoldObject"] {
  console.log(`${step} ${short(hold.hold_id)} ${status} ${hold.status}`);
  return hold;
}

function take(holdId: string, user: string, qty: number): Schemas["HoldBody"] {
  return { hold_id: prefix + holdId, user, items: [{ pool, qty }] };
}

async function main(): Promise<void> {
  // A pool with a per-user limit.
  const created = await client.PUT("/v1/pools/{pool}", {
    params: { path: { pool } },
    body: { total: 5, per_user_limit: 2 },
  });
  poolLine("put_pool", created.response.status, ok(created));

  // Reserve with ttl_ms, confirm and wait_ms left out: the server's defaults apply.
  const reserved = await client.POST("/v1/holds", { body: take("h1", "ann", 2) });
  const hold = holdLine("reserve", reserved.response.status, ok(reserved));
  console.log(`ttl_ms ${hold.expires_at_ms - hold.created_at_ms}`);

  // The user's limit: a 409 whose body is typed by its error code.
  const refused = await client.POST("/v1/holds", { body: take("h2", "ann", 1) });
  const error = refused.error;
  if (error === undefined || error.error !== "user_limit_exceeded") {
    throw new Error(`expected user_limit_exceeded: ${JSON.stringify(error)}`);
  }
  console.log(
    `reserve h2 ${refused.response.status} ${error.error} limit=${error.limit} used=${error.used} requested=${error.requested}`,
  );

  // Confirm and release with default arguments (no body).
  const hold1 = { params: { path: { hold_id: `${prefix}h1` } } };
  const confirmed = await client.POST("/v1/holds/{hold_id}/confirm", hold1);
  holdLine("confirm", confirmed.response.status, ok(confirmed));
  const other = await client.POST("/v1/holds", { body: take("h3", "bob", 1) });
  holdLine("reserve", other.response.status, ok(other));
  const released = await client.POST("/v1/holds/{hold_id}/release", {
    params: { path: { hold_id: `${prefix}h3` } },
  });
  holdLine("release", released.response.status, ok(released));

  // Refund with the body the document now names.
  const refunded = await client.POST("/v1/holds/{hold_id}/refund", {
    ...hold1,
    body: { restock: false },
  });
  holdLine("refund", refunded.response.status, ok(refunded));
  const read = await client.GET("/v1/pools/{pool}", { params: { path: { pool } } });
  poolLine("get_pool", read.response.status, ok(read));

  // A batch of typed ops, and one value that is not an op: its result is its own 422.
  const ops: Schemas["BatchOp"][] = [
    { op: "reserve", hold_id: `${prefix}h4`, user: "cid", items: [{ pool, qty: 1 }], confirm: true },
    { op: "confirm", hold_id: `${prefix}h4` },
    { op: "refund", hold_id: `${prefix}h4`, restock: false },
    { op: "release", hold_id: `${prefix}h5` },
    { op: "extend", hold_id: `${prefix}h4`, ttl_ms: 5 },
  ];
  // The op types catch what the server would refuse in its result: an extend needs ttl_ms.
  // @ts-expect-error ttl_ms is missing
  const incomplete: Schemas["BatchOp"] = { op: "extend", hold_id: `${prefix}h4` };
  void incomplete;
  const batch = await client.POST("/v1/batch", { body: { ops: [...ops, { op: "nope" }] } });
  const results = ok(batch).results.map((result) =>
    "status" in result.body && "hold_id" in result.body
      ? `${result.status}:${result.body.status}`
      : `${result.status}:${"error" in result.body ? result.body.error : "?"}`,
  );
  console.log(`batch ${batch.response.status} ${results.join(" ")}`);
  const after = await client.GET("/v1/pools/{pool}", { params: { path: { pool } } });
  poolLine("get_pool", after.response.status, ok(after));

  // The feed, read from the start: this scenario's events, in order.
  const page = ok(await client.GET("/v1/events", { params: { query: { limit: 1000 } } }));
  const mine = page.events
    .filter((event) => event.pool === pool || (event.hold_id?.startsWith(prefix) ?? false))
    .map(({ type, hold_id }) => (hold_id === undefined ? type : `${type}:${short(hold_id)}`));
  console.log(`events ${mine.join(" ")}`);
}

await main();
