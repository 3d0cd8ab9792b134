// Small helpers the views share: building elements (text is always set as text, never parsed
// as HTML), formatting numbers and times, the stock bar, and a poller that never overlaps its
// own requests.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(element, attributes, children) {
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") element.textContent = String(value);
    else if (name === "class") element.setAttribute("class", value);
    else if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(element.dataset, value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** `h("a", {href: "#/", class: "x", onclick: f}, "text", child)`. */
export function h(tag, attributes, ...children) {
  return build(document.createElement(tag), attributes, children);
}

export function svg(tag, attributes, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attributes, children);
}

const numbers = new Intl.NumberFormat("en-US");

export function number(value) {
  return value === null || value === undefined ? "—" : numbers.format(value);
}

const pad = (value, width = 2) => String(value).padStart(width, "0");

/**
 * A `*_ms` value in this browser's time zone, as ISO 8601 with its UTC offset:
 * `2026-05-14T14:03:07.250+02:00`. Always the whole date and the offset: an operator comparing
 * the console with a log, an order e-mail or a colleague in another zone must not have to guess
 * the day or the zone.
 */
function iso(ms, millis) {
  const date = new Date(ms);
  const offsetMinutes = -date.getTimezoneOffset();
  const offsetSize = Math.abs(offsetMinutes);
  const offset = `${offsetMinutes < 0 ? "-" : "+"}${pad(Math.floor(offsetSize / 60))}:${pad(offsetSize % 60)}`;
  return (
    `${pad(date.getFullYear(), 4)}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}` +
    `T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}` +
    (millis ? `.${pad(date.getMilliseconds(), 3)}` : "") +
    offset
  );
}

/** A `*_ms` value as text: `2026-05-14 14:03:07.250 +02:00` (ISO 8601, spaced to be read). */
export function time(ms, { millis = true } = {}) {
  if (ms === null || ms === undefined) return "—";
  const text = iso(ms, millis);
  const zoneAt = text.length - 6;
  return `${text.slice(0, zoneAt).replace("T", " ")} ${text.slice(zoneAt)}`;
}

/** This browser's time zone, the one every time of the console is shown in: `Europe/Paris`. */
export function zoneName() {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "this browser's local time";
}

/**
 * A `*_ms` value as a `<time>` element: the text of `time()`, the machine-readable value in
 * `datetime`, and the long form with the zone's name on hover.
 */
export function timeElement(ms, { millis = true, id } = {}) {
  if (ms === null || ms === undefined) return h("span", { id, text: "—" });
  const spelled = new Date(ms).toLocaleString(undefined, { dateStyle: "full", timeStyle: "long" });
  return h("time", { id, datetime: iso(ms, millis), title: `${spelled} (${zoneName()})`, text: time(ms, { millis }) });
}

/** "in 4 m 10 s" / "2 m ago". */
export function relative(ms, now = Date.now()) {
  const seconds = Math.round((ms - now) / 1000);
  const size = Math.abs(seconds);
  const text =
    size < 60 ? `${size} s` : size < 3600 ? `${Math.floor(size / 60)} m ${size % 60} s` : `${Math.floor(size / 3600)} h ${Math.floor((size % 3600) / 60)} m`;
  return seconds >= 0 ? `in ${text}` : `${text} ago`;
}

/** Whether a pool is at or below its low-stock threshold, or sold out. */
export function lowStock(pool) {
  const threshold = pool.low_stock_threshold;
  return (threshold !== null && pool.available <= threshold) || (pool.total > 0 && pool.available === 0);
}

/** The stacked bar of a pool: sold, held, available, as shares of total. */
export function stockBar() {
  const parts = {
    sold: h("span", { class: "sold" }),
    held: h("span", { class: "held" }),
    available: h("span", { class: "available" }),
  };
  const bar = h("div", { class: "bar", role: "img" }, parts.sold, parts.held, parts.available);
  bar.update = (pool) => {
    const total = Math.max(pool.total, 1);
    for (const name of ["sold", "held", "available"]) {
      // CSSOM, not a style attribute: allowed by the page's Content-Security-Policy.
      parts[name].style.width = `${(100 * pool[name]) / total}%`;
    }
    bar.setAttribute(
      "aria-label",
      `${pool.available} available, ${pool.held} held, ${pool.sold} sold of ${pool.total}`,
    );
  };
  return bar;
}

/** The numbers of a pool, each in an element of its own (`.n-available`, ...). */
export function stockNumbers(pool) {
  return h(
    "span",
    { class: "numbers" },
    h("b", { class: "n-available", text: number(pool.available) }),
    " available · ",
    h("b", { class: "n-held", text: number(pool.held) }),
    " held · ",
    h("b", { class: "n-sold", text: number(pool.sold) }),
    " sold of ",
    h("b", { class: "n-total", text: number(pool.total) }),
  );
}

export function poolLink(pool) {
  return h("a", { href: `#/pool/${encodeURIComponent(pool)}`, class: "pool-link", text: pool });
}

export function holdLink(holdId) {
  return h("a", { href: `#/hold/${encodeURIComponent(holdId)}`, class: "hold-link", text: holdId });
}

/**
 * Runs `task(signal)` now and then `intervalMs` after each run ends (never two at once), while
 * the tab is visible; `stop()` ends it and aborts a request in flight. Errors go to `onError`.
 */
export function every(intervalMs, task, onError) {
  const controller = new AbortController();
  let timer = null;
  async function tick() {
    if (controller.signal.aborted) return;
    if (document.visibilityState !== "hidden") {
      try {
        await task(controller.signal);
      } catch (error) {
        if (!controller.signal.aborted && error.name !== "AbortError") onError?.(error);
      }
    }
    if (!controller.signal.aborted) timer = setTimeout(tick, intervalMs);
  }
  tick();
  return () => {
    controller.abort();
    clearTimeout(timer);
  };
}

/** A line that shows the last error of an action, or nothing. */
export function messageLine() {
  const line = h("p", { class: "message", role: "status", hidden: true });
  line.show = (text, kind = "error") => {
    line.textContent = text;
    line.className = `message ${kind}`;
    line.hidden = !text;
  };
  return line;
}
