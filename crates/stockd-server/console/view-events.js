// The live event feed, every partition, newest first; pausable (the view stops moving while
// the console keeps reading, and counts what arrived meanwhile), and filterable by pool or
// hold id. Also the event rows the pool and hold pages use.

import { h, holdLink, number, poolLink, time, timeElement } from "./dom.js";
import { feed } from "./feed.js";

/** Rows shown; the console keeps more (feed.js) for the pool and hold pages. */
const ROWS_SHOWN = 300;

// Kept across visits to the page (within this tab).
const choices = { paused: false, filter: "" };

export function eventTable({ partitionColumn }) {
  const body = h("tbody");
  const heads = ["time", partitionColumn ? "partition · seq" : "seq", "event", "what"];
  const table = h("table", { class: "events" }, h("thead", {}, h("tr", {}, ...heads.map((text) => h("th", { text })))), body);
  return { table, body };
}

function details(event) {
  const parts = [];
  if (event.items) {
    parts.push(...event.items.flatMap((item, index) => [index ? ", " : "", poolLink(item.pool), ` × ${number(item.qty)}`]));
  } else if (event.pool) {
    parts.push(poolLink(event.pool));
  }
  if (event.user) parts.push(` · user ${event.user}`);
  if (event.delta !== undefined) parts.push(` · ${event.delta > 0 ? "+" : ""}${number(event.delta)}`);
  if (event.total !== undefined) parts.push(` · total ${number(event.total)}`);
  if (event.available !== undefined) parts.push(` · available ${number(event.available)}`);
  if (event.low_stock_threshold !== undefined) parts.push(` · threshold ${number(event.low_stock_threshold)}`);
  if (event.expires_at_ms !== undefined && (event.type === "held" || event.type === "extended")) {
    parts.push(` · until ${time(event.expires_at_ms, { millis: false })}`);
  }
  // An event without items or pool (extended) starts with its first detail, not a separator.
  if (typeof parts[0] === "string") parts[0] = parts[0].replace(/^ · /, "");
  return parts;
}

export function eventRow(event, { partitionColumn }) {
  if (event.gap) {
    return h(
      "tr",
      { class: "gap" },
      h("td", {}, timeElement(event.at_ms)),
      h("td", { text: partitionColumn ? `${event.partition} · ${event.from}–${event.to}` : `${event.from}–${event.to}` }),
      h("td", { text: "gap" }),
      h("td", { text: "The feed no longer kept these events when the console asked for them." }),
    );
  }
  const where = partitionColumn ? `${event.partition} · ${event.seq}` : String(event.seq);
  return h(
    "tr",
    { class: `event ${event.type}`, dataset: { seq: event.seq, type: event.type } },
    h("td", {}, timeElement(event.at_ms)),
    h("td", { text: where }),
    h("td", {}, h("span", { class: `type ${event.type}`, text: event.type.replace("_", " ") }), event.hold_id ? [" ", holdLink(event.hold_id)] : []),
    h("td", {}, ...details(event)),
  );
}

function matches(event, filter) {
  if (!filter) return true;
  if (event.gap) return true;
  return (
    (event.pool || "").includes(filter) ||
    (event.hold_id || "").includes(filter) ||
    (event.items || []).some((item) => item.pool.includes(filter))
  );
}

export function mount(root) {
  const pause = h("button", { id: "feed-pause", type: "button" });
  const filter = h("input", { id: "feed-filter", type: "search", placeholder: "pool or hold id contains", value: choices.filter, "aria-label": "Filter" });
  const state = h("p", { id: "feed-state", class: "summary" });
  const { table, body } = eventTable({ partitionColumn: true });
  body.id = "feed-events";
  root.append(h("h1", { text: "Events" }), h("div", { class: "toolbar" }, pause, h("label", {}, "Filter ", filter)), state, table);

  let missed = 0;

  function render() {
    const shown = [];
    const events = feed.events();
    for (let index = events.length - 1; index >= 0 && shown.length < ROWS_SHOWN; index--) {
      if (matches(events[index], choices.filter)) shown.push(events[index]);
    }
    body.replaceChildren(...shown.map((event) => eventRow(event, { partitionColumn: true })));
    if (shown.length === 0) body.append(h("tr", {}, h("td", { colspan: 4, class: "empty", text: "No events yet." })));
    missed = 0;
  }

  function renderState() {
    pause.textContent = choices.paused ? "Resume" : "Pause";
    pause.classList.toggle("paused", choices.paused);
    const partitions = feed.partitions();
    const failure = feed.failure();
    state.textContent = failure
      ? `The feed cannot be read right now (${failure.message}); retrying.`
      : choices.paused
        ? `Paused: ${number(missed)} new event${missed === 1 ? "" : "s"} since. The console keeps reading the feed.`
        : `Live: ${partitions} partition${partitions === 1 ? "" : "s"}, newest first, ${number(feed.events().length)} events kept by the console.`;
    state.classList.toggle("paused", choices.paused);
  }

  const unsubscribe = feed.subscribe((events) => {
    if (choices.paused) missed += events.filter((event) => matches(event, choices.filter)).length;
    else render();
    renderState();
  });
  pause.addEventListener("click", () => {
    choices.paused = !choices.paused;
    if (!choices.paused) render();
    renderState();
  });
  filter.addEventListener("input", () => {
    choices.filter = filter.value.trim();
    render();
    renderState();
  });
  render();
  renderState();
  feed.start().then(() => {
    if (!choices.paused) render();
    renderState();
  });
  return unsubscribe;
}
