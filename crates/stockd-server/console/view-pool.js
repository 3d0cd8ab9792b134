// One pool: its numbers and rules, a chart of its numbers over the last minutes, its segments
// when it has more than one, its recent events (live, from the feed), and for admin tokens
// restock and delete. Polls the pool every second (and a segmented pool's segments after it).

import { adminCall, ApiError, call, errorText } from "./api.js";
import { chart } from "./chart.js";
import { every, h, lowStock, messageLine, number, stockBar, stockNumbers, time } from "./dom.js";
import { feed, touchesPool } from "./feed.js";
import { DELETE_POOL, GET_POOL, GET_POOL_SEGMENTS, RESTOCK } from "./operations.js";
import { eventRow, eventTable } from "./view-events.js";
import { forget, record, samplesOf } from "./series.js";
import { session } from "./session.js";

const POLL_MS = 1000;
/** Events of the pool listed, newest first. */
const EVENTS_SHOWN = 50;

/** Whether a pool has more than one segment (a pool object without the field has one). */
const segmented = (pool) => (pool?.segments ?? 1) > 1;

export function mount(root, poolId) {
  const heading = h("h1", {}, "Pool ", h("span", { class: "pool-id", text: poolId }));
  const state = h("p", { id: "pool-state", class: "summary" });
  const bar = stockBar();
  const numbers = h("p", { id: "pool-numbers", class: "numbers-box" });
  const rules = h("dl", { id: "pool-rules", class: "rules" });
  const plot = chart();
  const adminBox = h("div", { class: "admin" });
  const segmentsState = h("p", { id: "pool-segments-state", class: "summary" });
  const segmentsBody = h("tbody", { id: "pool-segments-rows" });
  const segmentsBox = h(
    "section",
    { id: "pool-segments", hidden: true },
    h("h2", { text: "Segments" }),
    segmentsState,
    h(
      "table",
      { class: "segments" },
      h("thead", {}, h("tr", {}, ...["segment", "partition", "available", "held", "sold", "total"].map((text) => h("th", { text })))),
      segmentsBody,
    ),
  );
  const { table, body: eventsBody } = eventTable({ partitionColumn: false });
  eventsBody.id = "pool-events";
  const feedNote = h("p", { class: "hint" });
  root.append(
    h("p", { class: "crumbs" }, h("a", { href: "#/", text: "Pools" }), " / ", poolId),
    heading,
    state,
    h("div", { class: "pool-head" }, bar, numbers),
    h(
      "div",
      { class: "pool-body" },
      h("section", {}, h("h2", { text: "Last minutes" }), plot),
      h("section", {}, h("h2", { text: "Rules" }), rules, adminBox),
    ),
    segmentsBox,
    h("h2", { text: "Recent events" }),
    feedNote,
    table,
  );

  let pool = null;
  /** The pool's segments as last read (null: one segment, or not read). */
  let segments = null;

  function render() {
    plot.update(samplesOf(poolId));
    if (!pool) return;
    bar.update(pool);
    numbers.replaceChildren(stockNumbers(pool));
    bar.parentElement.classList.toggle("low", lowStock(pool));
    const now = Date.now();
    const window =
      pool.starts_at_ms !== null && now < pool.starts_at_ms
        ? `opens ${time(pool.starts_at_ms, { millis: false })}`
        : pool.ends_at_ms !== null && now >= pool.ends_at_ms
          ? `ended ${time(pool.ends_at_ms, { millis: false })}`
          : "open";
    rules.replaceChildren(
      ...[
        ["sale", window],
        ["per-user limit", pool.per_user_limit === null ? "none" : number(pool.per_user_limit)],
        ["low stock at", pool.low_stock_threshold === null ? "not set" : `${number(pool.low_stock_threshold)} or fewer`],
        ["feed partition", String(pool.partition ?? 0)],
        ["segments", number(pool.segments ?? 1), "pool-segments-count"],
      ].flatMap(([term, value, id]) => [h("dt", { text: term }), h("dd", { id, text: value })]),
    );
  }

  /** One row per segment; a backend that keeps the pool whole answers segment 0 only. */
  function renderSegments() {
    segmentsBox.hidden = !segmented(pool);
    if (!segments) {
      segmentsBody.replaceChildren();
      return;
    }
    segmentsBody.replaceChildren(
      ...segments.map((segment) =>
        h(
          "tr",
          { dataset: { segment: segment.segment } },
          h("td", { text: String(segment.segment) }),
          h("td", { text: String(segment.partition) }),
          ...["available", "held", "sold", "total"].map((name) => h("td", {}, h("b", { class: `n-${name}`, text: number(segment[name]) }))),
        ),
      ),
    );
    segmentsState.classList.remove("error");
    segmentsState.textContent =
      segments.length < pool.segments
        ? `Created with ${number(pool.segments)} segments; this backend keeps the pool whole, as segment 0.`
        : `${number(segments.length)} segments, spread over the partitions.`;
  }

  /** The pool's segments, or null when the pool went away meanwhile (its next read says so). */
  async function readSegments(signal) {
    try {
      return (await call(GET_POOL_SEGMENTS, { params: { pool: poolId }, signal })).segments;
    } catch (error) {
      if (error instanceof ApiError && error.code === "pool_not_found") return null;
      throw error;
    }
  }

  function renderEvents() {
    const events = feed
      .events()
      .filter((event) => !event.gap && touchesPool(event, poolId))
      .slice(-EVENTS_SHOWN)
      .reverse();
    eventsBody.replaceChildren(...events.map((event) => eventRow(event, { partitionColumn: false })));
    if (events.length === 0) {
      eventsBody.append(h("tr", {}, h("td", { colspan: 4, class: "empty", text: "No events of this pool since the console started." })));
    }
    const failure = feed.failure();
    feedNote.textContent = failure
      ? `The feed cannot be read right now (${failure.message}); retrying.`
      : `Live from the event feed: this pool's events since shortly before the console opened.`;
  }

  async function poll(signal) {
    try {
      pool = await call(GET_POOL, { params: { pool: poolId }, signal });
      record(pool);
      state.textContent = `Updated ${time(Date.now(), { millis: false })}`;
      state.classList.remove("error");
    } catch (error) {
      if (!(error instanceof ApiError) || error.code !== "pool_not_found") throw error;
      pool = null;
      state.textContent = `There is no pool ${poolId} (never created, or deleted).`;
      state.classList.add("error");
    }
    render();
    segments = null;
    if (segmented(pool)) {
      try {
        segments = await readSegments(signal);
      } catch (error) {
        if (error.name === "AbortError") throw error;
        // The pool's own numbers stay; only the segments' table says it could not be read.
        segmentsState.textContent = `Cannot read the segments: ${errorText(error)}`;
        segmentsState.classList.add("error");
      }
    }
    renderSegments();
  }

  const stopPolling = every(POLL_MS, poll, (error) => {
    state.textContent = `Cannot read the pool: ${error.message}`;
    state.classList.add("error");
  });
  renderEvents();
  feed.start().then(renderEvents);
  const unsubscribeFeed = feed.subscribe(renderEvents);

  const renderAdmin = () => adminBox.replaceChildren(...(session.mayAdmin() ? adminForms(poolId) : []));
  renderAdmin();
  const unsubscribeSession = session.subscribe(renderAdmin);

  return () => {
    stopPolling();
    unsubscribeFeed();
    unsubscribeSession();
  };
}

function adminForms(poolId) {
  const params = { pool: poolId };
  const delta = h("input", { id: "restock-delta", type: "number", required: true, placeholder: "+ or − units", "aria-label": "Restock delta" });
  const restockMessage = messageLine();
  const restock = h(
    "form",
    { id: "restock-form", class: "inline-form", autocomplete: "off" },
    h("strong", { text: "Restock" }),
    delta,
    h("button", { type: "submit", text: "Restock" }),
    restockMessage,
  );
  restock.addEventListener("submit", async (event) => {
    event.preventDefault();
    const units = Number(delta.value);
    try {
      const pool = await adminCall(RESTOCK, { params, body: { delta: units } });
      restockMessage.show(`Restocked by ${units > 0 ? "+" : ""}${number(units)}: total ${number(pool.total)}.`, "ok");
      restock.reset();
    } catch (error) {
      restockMessage.show(errorText(error));
    }
  });

  // Deleting ends the pool for good (its holds can no longer be refunded): a second click.
  const deleteMessage = messageLine();
  const confirmBox = h("span", { class: "confirm", hidden: true });
  const ask = h("button", { id: "delete-pool", type: "button", class: "danger", text: "Delete pool…" });
  const really = h("button", { id: "delete-pool-confirm", type: "button", class: "danger", text: `Delete ${poolId}` });
  const cancel = h("button", { type: "button", text: "Cancel" });
  confirmBox.append(`Deleting ends ${poolId}: its holds can no longer be refunded, even by a new pool of the same id. `, really, cancel);
  ask.addEventListener("click", () => {
    ask.hidden = true;
    confirmBox.hidden = false;
  });
  cancel.addEventListener("click", () => {
    ask.hidden = false;
    confirmBox.hidden = true;
  });
  really.addEventListener("click", async () => {
    try {
      await adminCall(DELETE_POOL, { params });
      forget(poolId);
      deleteMessage.show(`Deleted ${poolId}.`, "ok");
    } catch (error) {
      deleteMessage.show(errorText(error));
    }
    ask.hidden = false;
    confirmBox.hidden = true;
  });
  const removal = h("div", { id: "delete-box", class: "inline-form" }, h("strong", { text: "Delete" }), ask, confirmBox, deleteMessage);
  return [restock, removal];
}
