// The operator's token and what the console has learned about it, kept in this tab only
// (sessionStorage: gone when the tab closes, never shared with other tabs or written to disk by
// the console).
//
// stockd has no "who am I" endpoint, so the role is learned from answers: a read answered
// without a token means the server has no tokens ("open"); a pool write answered 403 means a
// client token, one that succeeds means an admin token. Until then the role is "unknown" and the
// admin actions are shown; the first refusal hides them and says why.

const TOKEN_KEY = "stockd.token";
const ROLE_KEY = "stockd.role";

const listeners = new Set();
let tokenWaiters = [];
let asking = false;

function notify() {
  for (const listener of listeners) listener();
}

export const session = {
  token() {
    return sessionStorage.getItem(TOKEN_KEY);
  },

  /** "open" (no tokens on this server), "admin", "client" or "unknown". */
  role() {
    return sessionStorage.getItem(ROLE_KEY) || "unknown";
  },

  /** Whether the admin actions (create, restock, delete a pool) are worth showing. */
  mayAdmin() {
    return this.role() !== "client";
  },

  /** Whether a token is being asked for (callers wait instead of polling). */
  asking() {
    return asking;
  },

  subscribe(listener) {
    listeners.add(listener);
    return () => listeners.delete(listener);
  },

  learnRole(role) {
    if (this.role() === role) return;
    sessionStorage.setItem(ROLE_KEY, role);
    notify();
  },

  /** A token the server accepted (checked by the token dialog). */
  useToken(token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    sessionStorage.removeItem(ROLE_KEY);
    asking = false;
    const waiters = tokenWaiters;
    tokenWaiters = [];
    for (const resolve of waiters) resolve();
    notify();
  },

  forget() {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(ROLE_KEY);
  },

  /**
   * The server answered 401 to a request that carried `refused` (or no token): drop that token
   * (it was rotated away, or never valid), ask for one, and resolve once a new one is in use.
   */
  tokenRefused(refused, signal) {
    if (refused !== null && this.token() === refused) {
      sessionStorage.removeItem(TOKEN_KEY);
      sessionStorage.removeItem(ROLE_KEY);
    }
    if (!asking) {
      asking = true;
      notify();
    }
    return new Promise((resolve, reject) => {
      tokenWaiters.push(resolve);
      signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
    });
  },
};
