// The pools: live bars of available / held / sold, filtered by prefix (on the server, with the
// list endpoint's `prefix`), sorted, low stock highlighted, segmented pools marked with their
// segment count; and, for admin tokens, creating a pool. Polls one page of the list every second.

import { adminCall, call, errorText } from "./api.js";
import { every, h, lowStock, messageLine, number, poolLink, stockBar, stockNumbers, time } from "./dom.js";
import { LIST_POOLS, PUT_POOL } from "./operations.js";
import { record } from "./series.js";
import { session } from "./session.js";

const POLL_MS = 1000;
/** Pools read per poll (one request); more matching pools are announced, not fetched. */
const LIST_LIMIT = 500;

const SORTS = {
  name: { label: "name", compare: (a, b) => (a.pool < b.pool ? -1 : a.pool > b.pool ? 1 : 0) },
  available: { label: "least available", compare: (a, b) => a.available - b.available },
  share: { label: "least available share", compare: (a, b) => share(a) - share(b) },
  held: { label: "most held", compare: (a, b) => b.held - a.held },
  sold: { label: "most sold", compare: (a, b) => b.sold - a.sold },
};

const share = (pool) => (pool.total === 0 ? 0 : pool.available / pool.total);

// Kept across visits to the page (within this tab).
const choices = { prefix: "", sort: "name", lowOnly: false };

export function mount(root) {
  const prefix = h("input", { id: "pool-prefix", type: "search", placeholder: "pool prefix", value: choices.prefix, "aria-label": "Pool prefix" });
  const sort = h(
    "select",
    { id: "pool-sort", "aria-label": "Sort by" },
    ...Object.entries(SORTS).map(([key, { label }]) => h("option", { value: key, text: label, selected: key === choices.sort })),
  );
  const lowOnly = h("input", { id: "pool-low-only", type: "checkbox", checked: choices.lowOnly });
  const summary = h("p", { id: "pool-summary", class: "summary" });
  const list = h("ol", { id: "pool-list", class: "pools" });
  const createBox = h("div", { class: "admin" });
  root.append(
    h("h1", { text: "Pools" }),
    h(
      "div",
      { class: "toolbar" },
      h("label", {}, "Prefix ", prefix),
      h("label", {}, "Sort by ", sort),
      h("label", {}, lowOnly, " low stock only"),
    ),
    createBox,
    summary,
    list,
  );

  const rows = new Map();
  let pools = [];
  let more = false;

  function rowOf(pool) {
    let row = rows.get(pool.pool);
    if (!row) {
      const bar = stockBar();
      const numbers = h("span", { class: "numbers-box" });
      const segments = h("span", { class: "segments-tag", hidden: true });
      row = h("li", { class: "pool", dataset: { pool: pool.pool } }, h("span", { class: "pool-name" }, poolLink(pool.pool), segments), bar, numbers);
      row.update = (next) => {
        // Only a pool of several segments says so: one segment is every pool's default.
        const count = next.segments ?? 1;
        segments.hidden = count <= 1;
        segments.textContent = `${number(count)} segments`;
        bar.update(next);
        numbers.replaceChildren(stockNumbers(next));
        row.classList.toggle("low", lowStock(next));
        row.title = next.low_stock_threshold === null ? "" : `low stock at ${number(next.low_stock_threshold)} or fewer`;
      };
      rows.set(pool.pool, row);
    }
    row.update(pool);
    return row;
  }

  function render() {
    const shown = pools.filter((pool) => !choices.lowOnly || lowStock(pool)).sort(SORTS[choices.sort].compare);
    const lowCount = pools.filter(lowStock).length;
    const order = shown.map(rowOf);
    // Rows are only moved when the order changes: a moved element restarts its bar's animation.
    if (order.length !== list.children.length || order.some((row, index) => list.children[index] !== row)) {
      list.replaceChildren(...order);
    }
    const present = new Set(pools.map((pool) => pool.pool));
    for (const name of rows.keys()) if (!present.has(name)) rows.delete(name);
    summary.classList.remove("error");
    summary.textContent =
      `${number(pools.length)}${more ? "+" : ""} pool${pools.length === 1 ? "" : "s"}` +
      (choices.prefix ? ` starting with “${choices.prefix}”` : "") +
      `, ${number(lowCount)} low on stock` +
      (more ? `: showing the first ${number(LIST_LIMIT)} by name, narrow the prefix to see the others` : "") +
      ` · updated ${time(Date.now(), { millis: false })}`;
    if (shown.length === 0) {
      const why = pools.length > 0 ? "No pool is low on stock." : choices.prefix ? `No pool starts with “${choices.prefix}”.` : "No pools yet.";
      list.append(h("li", { class: "empty", text: why }));
    }
  }

  async function poll(signal) {
    const answer = await call(LIST_POOLS, { query: { prefix: choices.prefix, limit: LIST_LIMIT }, signal });
    const now = Date.now();
    pools = answer.pools;
    more = answer.next !== null;
    for (const pool of pools) record(pool, now);
    render();
  }

  const failed = (error) => {
    summary.textContent = `Cannot list the pools: ${error.message}`;
    summary.classList.add("error");
  };
  let stopPolling = every(POLL_MS, poll, failed);
  const restart = () => {
    stopPolling();
    stopPolling = every(POLL_MS, poll, failed);
  };
  const prefixChanged = () => {
    if (choices.prefix === prefix.value.trim()) return;
    choices.prefix = prefix.value.trim();
    restart();
  };
  prefix.addEventListener("input", prefixChanged);
  prefix.addEventListener("change", prefixChanged);
  sort.addEventListener("change", () => {
    choices.sort = sort.value;
    render();
  });
  lowOnly.addEventListener("change", () => {
    choices.lowOnly = lowOnly.checked;
    render();
  });

  const renderAdmin = () => createBox.replaceChildren(session.mayAdmin() ? createForm(restart) : clientNote());
  renderAdmin();
  const unsubscribe = session.subscribe(renderAdmin);

  return () => {
    stopPolling();
    unsubscribe();
  };
}

function clientNote() {
  return h("p", {
    class: "hint",
    text: "This is a client token: creating, restocking and deleting pools needs an admin token (forget this one, then give an admin token).",
  });
}

function optionalInteger(input) {
  return input.value.trim() === "" ? undefined : Number(input.value);
}

function createForm(refresh) {
  const name = h("input", { id: "create-pool", required: true, placeholder: "pool id", pattern: "[A-Za-z0-9][A-Za-z0-9._:\\-]{0,127}", "aria-label": "Pool id" });
  const total = h("input", { id: "create-total", type: "number", min: 0, required: true, placeholder: "total", "aria-label": "Total" });
  const threshold = h("input", { id: "create-threshold", type: "number", min: 0, placeholder: "low stock at", "aria-label": "Low-stock threshold" });
  const limit = h("input", { id: "create-limit", type: "number", min: 1, placeholder: "per-user limit", "aria-label": "Per-user limit" });
  const segments = h("input", { id: "create-segments", type: "number", min: 1, max: 64, placeholder: "segments", "aria-label": "Segments (fixed once created)" });
  const message = messageLine();
  const form = h(
    "form",
    { id: "create-form", class: "inline-form", autocomplete: "off" },
    h("strong", { text: "New pool" }),
    name,
    total,
    threshold,
    limit,
    segments,
    h("button", { type: "submit", text: "Create" }),
    message,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const pool = name.value.trim();
    try {
      // if_absent: "create" must never reset an existing pool's numbers.
      const answer = await adminCall(PUT_POOL, {
        params: { pool },
        query: { if_absent: "true" },
        body: {
          total: Number(total.value),
          low_stock_threshold: optionalInteger(threshold),
          per_user_limit: optionalInteger(limit),
          segments: optionalInteger(segments),
        },
        status: true,
      });
      if (answer.status === 201) message.show(`Created ${pool}.`, "ok");
      else message.show(`${pool} already exists; it was left unchanged.`, "error");
      form.reset();
      refresh();
    } catch (error) {
      message.show(errorText(error));
    }
  });
  return form;
}
