// One hold looked up by id: its state (polled every 2 s), the actions that apply to it in that
// state (extend, confirm, release, refund: what an operator needs for a stuck hold), and its
// history, the hold's events searched in its feed partition and followed live.

import { ApiError, call, errorText } from "./api.js";
import { every, h, messageLine, number, poolLink, relative, time, timeElement, zoneName } from "./dom.js";
import { feed } from "./feed.js";
import { CONFIRM, EXTEND, GET_HOLD, REFUND, RELEASE } from "./operations.js";
import { eventRow, eventTable } from "./view-events.js";

const POLL_MS = 2000;
/** The extend form's first value: the API's default TTL (10 minutes). */
const EXTEND_SECONDS_DEFAULT = 600;
/** The API's bounds on extend's `ttl_ms` (1,000..=86,400,000), in the form's seconds. */
const EXTEND_SECONDS_MIN = 1;
const EXTEND_SECONDS_MAX = 86400;

/**
 * What an operator can do to a hold, one row per API command, each offered only in the status
 * the API accepts it in (docs/api.md, the hold states): the console does not offer what the API
 * would refuse for the hold as last read, and shows the refusal when the hold moved meanwhile.
 * They are all a client token's rights (docs/security.md: hold commands, not pool writes), so
 * every token the console can hold is offered them; a refusal, 403 included, is shown with its
 * code. The commands that cannot be undone ask for a second click, as deleting a pool does.
 */
/** The operation of each command an action sends. */
const COMMANDS = { extend: EXTEND, confirm: CONFIRM, release: RELEASE, refund: REFUND };

const ACTIONS = [
  {
    command: "extend",
    status: "held",
    controls: extendControls,
  },
  {
    command: "confirm",
    status: "held",
    controls: (hold, run) =>
      secondClick(hold, run, {
        command: "confirm",
        verb: "Confirm",
        warning: `Confirming sells ${units(hold)}: held becomes sold, as when the order is paid.`,
        done: "Confirmed",
      }),
  },
  {
    command: "release",
    status: "held",
    controls: (hold, run) =>
      secondClick(hold, run, {
        command: "release",
        verb: "Release",
        danger: true,
        warning: `Releasing cancels the hold: ${units(hold)} go back to available, and it can no longer be confirmed.`,
        done: "Released",
      }),
  },
  {
    command: "refund",
    status: "confirmed",
    controls: refundControls,
  },
];

/** Why a status offers nothing. */
const FINAL = {
  released: "A released hold is final: no action applies.",
  expired: "An expired hold is final (its units went back to available): no action applies.",
  refunded: "A refunded hold is final: no action applies.",
};

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
  const actions = h("div", { id: "hold-actions", class: "actions" });
  const actionMessage = messageLine();
  actionMessage.id = "hold-action-message";
  const { table, body } = eventTable({ partitionColumn: false });
  body.id = "hold-events";
  const historyNote = h("p", { id: "hold-history-note", class: "hint" });
  root.append(
    h("h1", {}, "Hold ", h("span", { class: "hold-id", text: holdId })),
    state,
    facts,
    h("h2", { text: "Actions" }),
    actions,
    actionMessage,
    h("h2", { text: "History" }),
    historyNote,
    table,
  );

  let hold = null;
  /** The status the actions were built for (rebuilt when it changes, not on every poll). */
  let actionsFor = null;
  /** Actions answered so far: a poll sent before an action's answer must not undo it. */
  let actionsAnswered = 0;
  const history = new Map();
  let searched = null;

  function renderFacts() {
    const now = Date.now();
    const held = hold.status === "held";
    facts.replaceChildren(
      ...[
        ["status", h("span", { id: "hold-status", class: `status ${hold.status}`, text: hold.status })],
        ["user", hold.user ?? "none"],
        ["items", hold.items.flatMap((item, index) => [index ? ", " : "", poolLink(item.pool), ` × ${number(item.qty)}`])],
        ["created", timeElement(hold.created_at_ms, { id: "hold-created" })],
        [
          held ? "expires" : "deadline",
          [timeElement(hold.expires_at_ms, { id: "hold-expires" }), held ? ` (${relative(hold.expires_at_ms, now)})` : ""],
        ],
        ["finished", hold.finished_at_ms === null ? "not yet" : timeElement(hold.finished_at_ms, { id: "hold-finished" })],
        ["time zone", h("span", { id: "hold-zone", text: `${zoneName()} (this browser's)` })],
        ["feed partition", String(hold.partition ?? 0)],
      ].flatMap(([term, value]) => [h("dt", { text: term }), h("dd", {}, value)]),
    );
  }

  function renderActions() {
    actionsFor = hold.status;
    const offered = ACTIONS.filter((action) => action.status === hold.status);
    if (offered.length === 0) {
      actions.replaceChildren(h("p", { class: "hint", text: FINAL[hold.status] ?? "No action applies." }));
      return;
    }
    actions.replaceChildren(...offered.map((action) => action.controls(hold, run)));
  }

  /** Sends `command` for this hold; shows `done(answer)` or the refusal, and the hold as it is. */
  async function run(command, requestBody, done) {
    for (const button of actions.querySelectorAll("button")) button.disabled = true;
    actionMessage.show("");
    try {
      hold = await call(COMMANDS[command], { params: { hold_id: holdId }, body: requestBody });
      actionMessage.show(done(hold), "ok");
    } catch (error) {
      actionMessage.show(`${command[0].toUpperCase()}${command.slice(1)} refused: ${errorText(error)}`);
    }
    actionsAnswered++;
    if (hold) {
      renderFacts();
      renderActions();
    }
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
    const answeredBefore = actionsAnswered;
    let read;
    try {
      read = await call(GET_HOLD, { params: { hold_id: holdId }, signal });
    } catch (error) {
      if (!(error instanceof ApiError) || error.code !== "hold_not_found") throw error;
      hold = null;
      state.textContent = `There is no hold ${holdId}: never made, or forgotten after its retention.`;
      state.classList.add("error");
      facts.replaceChildren();
      actions.replaceChildren();
      actionsFor = null;
      return;
    }
    if (answeredBefore !== actionsAnswered) return;
    hold = read;
    state.textContent = `Updated ${time(Date.now(), { millis: false })}`;
    state.classList.remove("error");
    renderFacts();
    if (actionsFor !== hold.status) renderActions();
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

function units(hold) {
  const count = hold.items.reduce((sum, item) => sum + item.qty, 0);
  return `${number(count)} unit${count === 1 ? "" : "s"}`;
}

/** Extend: a new deadline of now + the seconds typed (fewer than left moves it earlier). */
function extendControls(hold, run) {
  const seconds = h("input", {
    id: "hold-extend-seconds",
    type: "number",
    min: EXTEND_SECONDS_MIN,
    max: EXTEND_SECONDS_MAX,
    step: 1,
    required: true,
    value: EXTEND_SECONDS_DEFAULT,
    "aria-label": "Seconds from now",
  });
  const form = h(
    "form",
    { id: "hold-extend-form", class: "inline-form", autocomplete: "off" },
    h("strong", { text: "Extend" }),
    "deadline: now +",
    seconds,
    "seconds",
    h("button", { id: "hold-extend", type: "submit", text: "Extend" }),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    run("extend", { ttl_ms: Number(seconds.value) * 1000 }, (answer) =>
      `Extended: expires ${time(answer.expires_at_ms)} (${relative(answer.expires_at_ms)}).`,
    );
  });
  return form;
}

/** Refund, with the choice the API offers: back on sale (restock, the default) or out of the pool. */
function refundControls(hold, run) {
  const restock = h("input", { id: "hold-refund-restock", type: "checkbox", checked: true });
  return secondClick(hold, run, {
    command: "refund",
    verb: "Refund",
    danger: true,
    warning: `Refunding gives back ${units(hold)} sold by this hold; it cannot be undone.`,
    options: [h("label", {}, restock, " put them back on sale (unchecked: they leave the pool) ")],
    body: () => ({ restock: restock.checked }),
    done: "Refunded",
  });
}

/** A command that cannot be undone: a first click says what it does, a second one sends it. */
function secondClick(hold, run, { command, verb, warning, done, danger = false, options = [], body = () => undefined }) {
  const ask = h("button", { id: `hold-${command}`, type: "button", text: `${verb}…` });
  const go = h("button", { id: `hold-${command}-go`, type: "button", class: danger ? "danger" : undefined, text: `${verb} ${hold.hold_id}` });
  const cancel = h("button", { id: `hold-${command}-cancel`, type: "button", text: "Cancel" });
  const sure = h("span", { class: "confirm", hidden: true }, `${warning} `, ...options, go, " ", cancel);
  ask.addEventListener("click", () => {
    ask.hidden = true;
    sure.hidden = false;
  });
  cancel.addEventListener("click", () => {
    ask.hidden = false;
    sure.hidden = true;
  });
  go.addEventListener("click", () => run(command, body(), (answer) => `${done} ${answer.hold_id}: now ${answer.status}.`));
  return h("div", { id: `hold-${command}-box`, class: "inline-form" }, h("strong", { text: verb }), ask, sure);
}
