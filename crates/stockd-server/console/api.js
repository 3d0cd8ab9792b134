// The console's only way to stockd: the public HTTP API (the same one any client uses), with
// the operator's token. Every answer that is not a success becomes an ApiError carrying the
// contract's error code; a 401 asks the operator for a token and retries once one is given.
// Each request names its operation (operations.js, generated from stockd-api's table), never a
// method or path of its own.

import { LIST_POOLS } from "./operations.js";
import { session } from "./session.js";

// The page is served at <base>/ui/, so the API is at <base>/v1/... (also behind a proxy that
// mounts stockd under a prefix).
const API_ROOT = new URL("../", document.baseURI);

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.message || `HTTP ${status}`);
    this.status = status;
    this.code = body?.error || `http_${status}`;
    this.body = body || {};
  }
}

/**
 * An error as an operator reads it after an action: the API's message, then its HTTP status and
 * its code (`hold hold-7 is released (409 hold_released)`), the code being what the contract
 * and the logs name.
 */
export function errorText(error) {
  if (!(error instanceof ApiError)) return error.message;
  return `${error.message} (${error.status ? `${error.status} ` : ""}${error.code})`;
}

const listeners = new Set();

/** Called with (ok, error) after every answer or failure to reach stockd. */
export function onHealth(listener) {
  listeners.add(listener);
}

function health(ok, error) {
  for (const listener of listeners) listener(ok, error);
}

/**
 * The path of `operation` (one of operations.js) with each `{name}` segment replaced by
 * `params[name]`, percent-encoded as one segment: `pathOf(GET_POOL, { pool: "a/b" })` is
 * `v1/pools/a%2Fb`.
 */
export function pathOf(operation, params = {}) {
  return operation.path.replace(/\{([a-z_]+)\}/g, (_, name) => {
    if (!(name in params)) throw new Error(`${operation.method} ${operation.path} needs ${name}`);
    return encodeURIComponent(params[name]);
  });
}

export function url(path, query) {
  const target = new URL(path, API_ROOT);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") {
      target.searchParams.set(name, String(value));
    }
  }
  return target;
}

/**
 * One request of `operation` (its `{name}` segments from `params`) as the given token would send
 * it; resolves to the raw Response.
 */
export function send(operation, { params, query, body, signal, token } = {}) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  return fetch(url(pathOf(operation, params), query), {
    method: operation.method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: "no-store",
    credentials: "omit",
  });
}

async function decode(response) {
  const text = await response.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return { error: `http_${response.status}`, message: text.slice(0, 200) };
  }
}

/**
 * Calls the API: resolves to the decoded body of a 2xx (`{status, body}` with the option
 * `status: true`), rejects with an ApiError otherwise. A 401 waits for the operator to give a
 * token, then sends the request again.
 */
export async function call(operation, options = {}) {
  pathOf(operation, options.params); // a missing parameter is the console's bug, not unreachable
  for (;;) {
    const token = session.token();
    let response;
    try {
      response = await send(operation, { ...options, token });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      health(false, "stockd is unreachable");
      throw new ApiError(0, { error: "unreachable", message: "stockd is unreachable" });
    }
    const body = await decode(response);
    if (response.status === 401) {
      await session.tokenRefused(token, options.signal);
      continue;
    }
    health(response.status !== 503, body?.message);
    if (!response.ok) throw new ApiError(response.status, body);
    if (!token && session.role() !== "open") session.learnRole("open");
    return options.status ? { status: response.status, body } : body;
  }
}

/**
 * A pool write (create, restock, delete): only admin tokens may. A 403 teaches the console that
 * its token is a client token (the admin actions are then hidden) and is explained.
 */
export async function adminCall(operation, options = {}) {
  try {
    const body = await call(operation, options);
    if (session.token()) session.learnRole("admin");
    return body;
  } catch (error) {
    if (error.code === "forbidden") {
      session.learnRole("client");
      throw new ApiError(403, {
        error: "forbidden",
        message:
          "This is a client token: creating, restocking and deleting pools needs an admin " +
          "token. Forget this token and give an admin one to do that.",
      });
    }
    throw error;
  }
}

/** Whether `token` is accepted by the server (a cheap read with it). */
export async function tokenAccepted(token) {
  const response = await send(LIST_POOLS, { query: { limit: 1 }, token });
  if (response.status === 401) return false;
  if (!response.ok) {
    throw new ApiError(response.status, await decode(response));
  }
  return true;
}
