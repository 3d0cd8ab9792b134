// Each pool's numbers over the last minutes, as this console sampled them (every poll of the
// pool list or of a pool's page records one sample). The API keeps no history of numbers; the
// event feed has the changes but not the numbers, and the console does not redo the core's
// arithmetic to rebuild them.

/** How far back samples are kept. */
export const WINDOW_MS = 10 * 60 * 1000;
/** Pools whose samples are kept; the least recently sampled are dropped first. */
const POOLS_MAX = 2000;
/** Samples closer together than this replace each other. */
const RESOLUTION_MS = 500;

const series = new Map();

/** Records `pool` (a pool object) as seen at `atMs`. */
export function record(pool, atMs = Date.now()) {
  let samples = series.get(pool.pool);
  if (samples) {
    series.delete(pool.pool); // re-inserted last: the Map's order is least recent first
  } else {
    samples = [];
  }
  series.set(pool.pool, samples);
  const sample = { at_ms: atMs, total: pool.total, available: pool.available, held: pool.held, sold: pool.sold };
  if (samples.length > 0 && atMs - samples.at(-1).at_ms < RESOLUTION_MS) samples[samples.length - 1] = sample;
  else samples.push(sample);
  while (samples.length > 0 && samples[0].at_ms < atMs - WINDOW_MS) samples.shift();
  while (series.size > POOLS_MAX) series.delete(series.keys().next().value);
}

/** The samples of `pool`, oldest first (empty when never sampled). */
export function samplesOf(pool) {
  return series.get(pool) || [];
}

/** A pool deleted: its samples mean nothing for a pool created later under the same id. */
export function forget(pool) {
  series.delete(pool);
}
