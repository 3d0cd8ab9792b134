// Generated from stockd-api's operation table (crates/stockd-api/src/lib.rs) by the
// test `console_operations_are_the_api_table` (crates/stockd-server/src/routes/
// console.rs): do not edit; rerun that test with STOCKD_WRITE_CONSOLE_OPERATIONS=1
// to rewrite this file. Paths are relative to the API's root; api.js `pathOf` fills
// their `{name}` segments.

export const HEALTHZ = Object.freeze({ method: "GET", path: "healthz" });
export const READYZ = Object.freeze({ method: "GET", path: "readyz" });
export const METRICS = Object.freeze({ method: "GET", path: "metrics" });
export const OPENAPI = Object.freeze({ method: "GET", path: "openapi.json" });
export const LIST_POOLS = Object.freeze({ method: "GET", path: "v1/pools" });
export const PUT_POOL = Object.freeze({ method: "PUT", path: "v1/pools/{pool}" });
export const GET_POOL = Object.freeze({ method: "GET", path: "v1/pools/{pool}" });
export const GET_POOL_SEGMENTS = Object.freeze({ method: "GET", path: "v1/pools/{pool}/segments" });
export const DELETE_POOL = Object.freeze({ method: "DELETE", path: "v1/pools/{pool}" });
export const RESTOCK = Object.freeze({ method: "POST", path: "v1/pools/{pool}/restock" });
export const LIST_HOLDS = Object.freeze({ method: "GET", path: "v1/holds" });
export const RESERVE = Object.freeze({ method: "POST", path: "v1/holds" });
export const GET_HOLD = Object.freeze({ method: "GET", path: "v1/holds/{hold_id}" });
export const CONFIRM = Object.freeze({ method: "POST", path: "v1/holds/{hold_id}/confirm" });
export const RELEASE = Object.freeze({ method: "POST", path: "v1/holds/{hold_id}/release" });
export const EXTEND = Object.freeze({ method: "POST", path: "v1/holds/{hold_id}/extend" });
export const REFUND = Object.freeze({ method: "POST", path: "v1/holds/{hold_id}/refund" });
export const BATCH = Object.freeze({ method: "POST", path: "v1/batch" });
export const EVENTS = Object.freeze({ method: "GET", path: "v1/events" });
export const EVENT_PARTITIONS = Object.freeze({ method: "GET", path: "v1/events/partitions" });
export const LOCK_ACQUIRE = Object.freeze({ method: "POST", path: "v1/locks/{name}/acquire" });
export const LOCK_RENEW = Object.freeze({ method: "POST", path: "v1/locks/{name}/renew" });
export const LOCK_RELEASE = Object.freeze({ method: "POST", path: "v1/locks/{name}/release" });
