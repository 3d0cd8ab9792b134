// A small SVG chart of one pool's samples (series.js): available, held and sold as steps over
// time, from the first sample (at most the last 10 minutes) to now.

import { h, number, svg, time } from "./dom.js";

const WIDTH = 640;
const HEIGHT = 180;
const MARGIN = { left: 56, right: 8, top: 10, bottom: 22 };
/** The chart spans at least this much time, so that a new pool's first seconds are readable. */
const SPAN_MIN_MS = 30 * 1000;
const LINES = ["available", "held", "sold"];

export function chart() {
  const plot = svg("svg", {
    class: "chart",
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    role: "img",
    "aria-label": "available, held and sold over the last minutes",
  });
  const legend = h(
    "p",
    { class: "legend" },
    ...LINES.map((name) => h("span", { class: `key ${name}`, text: name })),
  );
  const figure = h("figure", { class: "chart-box" }, plot, legend);
  figure.update = (samples, now = Date.now()) => draw(plot, samples, now);
  return figure;
}

function draw(plot, samples, now) {
  plot.replaceChildren();
  if (samples.length === 0) {
    plot.append(svg("text", { x: WIDTH / 2, y: HEIGHT / 2, class: "empty", "text-anchor": "middle", text: "no samples yet" }));
    return;
  }
  const start = Math.min(samples[0].at_ms, now - SPAN_MIN_MS);
  const top = Math.max(1, ...samples.map((sample) => sample.total));
  const x = (ms) => MARGIN.left + ((ms - start) / (now - start)) * (WIDTH - MARGIN.left - MARGIN.right);
  const y = (value) => HEIGHT - MARGIN.bottom - (value / top) * (HEIGHT - MARGIN.top - MARGIN.bottom);
  // Axes: zero and the largest total, the first sample's time and now.
  plot.append(
    svg("line", { class: "axis", x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(0), y2: y(0) }),
    svg("line", { class: "grid", x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(top), y2: y(top) }),
    svg("text", { class: "tick", x: MARGIN.left - 6, y: y(0) + 4, "text-anchor": "end", text: "0" }),
    svg("text", { class: "tick", x: MARGIN.left - 6, y: y(top) + 4, "text-anchor": "end", text: number(top) }),
    svg("text", { class: "tick", x: MARGIN.left, y: HEIGHT - 6, text: time(start, { millis: false }) }),
    svg("text", { class: "tick", x: WIDTH - MARGIN.right, y: HEIGHT - 6, "text-anchor": "end", text: "now" }),
  );
  for (const name of LINES) {
    // Steps: a number holds until the next sample, and the last one until now.
    const points = [];
    samples.forEach((sample, index) => {
      if (index > 0) points.push(`${x(sample.at_ms)},${y(samples[index - 1][name])}`);
      points.push(`${x(sample.at_ms)},${y(sample[name])}`);
    });
    points.push(`${x(now)},${y(samples.at(-1)[name])}`);
    plot.append(svg("polyline", { class: `line ${name}`, points: points.join(" ") }));
  }
}
