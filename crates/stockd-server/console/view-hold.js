// One hold looked up by id: its state (polled every 2 s) and its history, the hold's events
// searched in its feed partition and followed live.

import { ApiError, call } from "./api.js";
import { every, h, number, poolLink, relative, time } from "./dom.js";
import { feed } from "./feed.js";
import { eventRow, eventTable } from "./view-events.js";

const POLL_MS = 2000;

export function mount(root, holdId) {
  if (!holdId) {
    root.append(
      h("h1", { text: "Hold lookup" }),
      h("p", { class: "hint", text: "Type a hold id (an order id, typically) in the box at the top right." }),
    );
    return () => {};
  }
  const state = h("p", { id: "hold-state", class: "summary" });
  const facts = h("dl", { id: "hold-facts", class: "rules" });
  const { table, body } = eventTable({ partitionColumn: false });
  body.id = "hold-events";
  const historyNote = h("p", { id: "hold-history-note", class: "hint" });
  root.append(
    h("h1", {}, "Hold ", h("span", { class: "hold-id", text: holdId })),
    state,
    facts,
    h("h2", { text: "History" }),
    historyNote,
    table,
  );

  let hold = null;
  const history = new Map();
  let searched = null;

  function renderFacts() {
    const now = Date.now();
    facts.replaceChildren(
      ...[
        ["status", h("span", { id: "hold-status", class: `status ${hold.status}`, text: hold.status })],
        ["user", hold.user ?? "none"],
        ["items", hold.items.flatMap((item, index) => [index ? ", " : "", poolLink(item.pool), ` × ${number(item.qty)}`])],
        ["created", time(hold.created_at_ms)],
        [
          hold.status === "held" ? "expires" : "deadline",
          `${time(hold.expires_at_ms)}${hold.status === "held" ? ` (${relative(hold.expires_at_ms, now)})` : ""}`,
        ],
        ["finished", hold.finished_at_ms === null ? "not yet" : time(hold.finished_at_ms)],
        ["feed partition", String(hold.partition ?? 0)],
      ].flatMap(([term, value]) => [h("dt", { text: term }), h("dd", {}, value)]),
    );
  }

  function renderHistory() {
    const events = [...history.values()].sort((a, b) => b.seq - a.seq);
    body.replaceChildren(...events.map((event) => eventRow(event, { partitionColumn: false })));
    if (events.length === 0) body.append(h("tr", {}, h("td", { colspan: 4, class: "empty", text: "No event of this hold is kept." })));
    if (searched === null) historyNote.textContent = "Searching the feed…";
    else if (searched.complete) historyNote.textContent = "Every event of this hold, from its creation; new ones appear as they happen.";
    else
      historyNote.textContent =
        "The feed no longer keeps this hold's first events (or they are further back than the console searches); " +
        "the times above come from the hold itself.";
  }

  const onEvents = (events) => {
    let changed = false;
    for (const event of events) {
      if (!event.gap && event.hold_id === holdId && event.partition === (hold?.partition ?? 0)) {
        history.set(event.seq, event);
        changed = true;
      }
    }
    if (changed && searched !== null) renderHistory();
  };
  const unsubscribe = feed.subscribe(onEvents);
  const controller = new AbortController();

  async function poll(signal) {
    try {
      hold = await call("GET", `v1/holds/${encodeURIComponent(holdId)}`, { signal });
    } catch (error) {
      if (!(error instanceof ApiError) || error.code !== "hold_not_found") throw error;
      hold = null;
      state.textContent = `There is no hold ${holdId}: never made, or forgotten after its retention.`;
      state.classList.add("error");
      facts.replaceChildren();
      return;
    }
    state.textContent = `Updated ${time(Date.now(), { millis: false })}`;
    state.classList.remove("error");
    renderFacts();
    if (searched === null) {
      searched = await feed.historyOf(hold, controller.signal);
      for (const event of searched.events) history.set(event.seq, event);
      renderHistory();
    }
  }

  const stopPolling = every(POLL_MS, poll, (error) => {
    state.textContent = `Cannot read the hold: ${error.message}`;
    state.classList.add("error");
  });
  return () => {
    stopPolling();
    controller.abort();
    unsubscribe();
  };
}
