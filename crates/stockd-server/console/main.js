// The console's entry point: the views by URL fragment (#/, #/pool/ID, #/hold/ID, #/events),
// the header (hold lookup, what the console knows of its token, whether stockd answers), and
// the token dialog.

import { onHealth, tokenAccepted } from "./api.js";
import { time } from "./dom.js";
import { feed } from "./feed.js";
import { session } from "./session.js";
import * as eventsView from "./view-events.js";
import * as holdView from "./view-hold.js";
import * as poolView from "./view-pool.js";
import * as poolsView from "./view-pools.js";

const ROUTES = [
  { pattern: /^#?\/?$/, view: poolsView, nav: "pools" },
  { pattern: /^#\/pool\/(.+)$/, view: poolView, nav: "pools" },
  { pattern: /^#\/hold\/(.*)$/, view: holdView, nav: null },
  { pattern: /^#\/events$/, view: eventsView, nav: "events" },
];

const root = document.getElementById("view");
let unmount = null;

function route() {
  unmount?.();
  root.replaceChildren();
  const hash = location.hash;
  const match = ROUTES.map((candidate) => ({ candidate, found: candidate.pattern.exec(hash) })).find(({ found }) => found);
  if (!match) {
    location.replace("#/");
    return;
  }
  const parameter = match.found[1] === undefined ? undefined : decoded(match.found[1]);
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("current", link.dataset.nav === match.candidate.nav);
  }
  unmount = match.candidate.view.mount(root, parameter);
}

/** A fragment's parameter as typed: ids need no encoding, but links encode them anyway. */
function decoded(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

function renderSession() {
  const role = session.role();
  const label = document.getElementById("session-role");
  const texts = {
    open: "no token needed",
    admin: "admin token",
    client: "client token",
    unknown: session.token() ? "token in use" : "",
  };
  label.textContent = texts[role];
  label.dataset.role = role;
  document.getElementById("session-forget").hidden = !session.token();
  const dialog = document.getElementById("token-dialog");
  if (session.asking() && !dialog.open) {
    dialog.showModal();
    document.getElementById("token-input").focus();
  }
}

function setUpTokenDialog() {
  const dialog = document.getElementById("token-dialog");
  const input = document.getElementById("token-input");
  const error = document.getElementById("token-error");
  // The console cannot work without a token: Escape does not close the dialog.
  dialog.addEventListener("cancel", (event) => event.preventDefault());
  document.getElementById("token-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    error.hidden = true;
    try {
      if (await tokenAccepted(token)) {
        input.value = "";
        dialog.close();
        session.useToken(token);
      } else {
        error.textContent = "This token is not accepted by this stockd.";
        error.hidden = false;
      }
    } catch (failure) {
      error.textContent = `Cannot check the token: ${failure.message}`;
      error.hidden = false;
    }
  });
  document.getElementById("session-forget").addEventListener("click", () => {
    session.forget();
    location.reload();
  });
}

function setUpLookup() {
  const input = document.getElementById("hold-lookup-id");
  document.getElementById("hold-lookup").addEventListener("submit", (event) => {
    event.preventDefault();
    const holdId = input.value.trim();
    if (holdId) location.hash = `#/hold/${encodeURIComponent(holdId)}`;
  });
}

function setUpHealth() {
  const live = document.getElementById("live");
  onHealth((ok, message) => {
    live.textContent = ok ? `live ${time(Date.now(), { millis: false })}` : message || "stockd is not answering";
    live.classList.toggle("down", !ok);
  });
}

setUpTokenDialog();
setUpLookup();
setUpHealth();
session.subscribe(renderSession);
renderSession();
window.addEventListener("hashchange", route);
route();
// Every view uses the feed (the pool and hold pages too): follow it from the start.
feed.start();
