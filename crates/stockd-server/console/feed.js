// The event feed, followed live for every view: every partition, from shortly before the
// console opened, with `after` and long polls (`wait_ms`), as the contract says a consumer
// should. Keeps the last BUFFER_MAX events in memory; a partition whose window moved past the
// console (410 `events_expired`) is resumed from the oldest kept event, with a gap recorded,
// never silently.

import { ApiError, call } from "./api.js";
import { EVENTS, EVENT_PARTITIONS } from "./operations.js";

/** Events kept in memory, all partitions together. */
const BUFFER_MAX = 5000;
/** Events read per partition when the console starts, before following. */
const BACKFILL = 300;
/** Events per request (the contract's maximum). */
const PAGE_LIMIT = 1000;
/** Long poll of a partition followed on its own connection. */
const LONG_POLL_MS = 25000;
/**
 * Connections used to follow the feed. A browser opens at most 6 connections to one origin;
 * the console keeps the others for its reads. With more partitions than this, a connection
 * takes turns on several, waiting less on each so that every one is read about once a second.
 */
const LANES_MAX = 3;
/** Pause after an error before asking again. */
const RETRY_MS = 2000;
/** How far back a hold's history is searched, in pages of PAGE_LIMIT events. */
const SEARCH_PAGES_MAX = 20;

const events = [];
const listeners = new Set();
let partitions = 0;
let cursors = [];
let started = null;
let failure = null;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function append(items) {
  if (items.length === 0) return;
  events.push(...items);
  if (events.length > BUFFER_MAX) events.splice(0, events.length - BUFFER_MAX);
  for (const listener of listeners) listener(items);
}

function page(partition, after, limit, waitMs, signal) {
  return call(EVENTS, {
    query: { partition, after, limit, wait_ms: waitMs || undefined },
    signal,
  });
}

function tag(partition, items) {
  return items.map((event) => ({ ...event, partition }));
}

/** Whether partition `partition` has any event after `after` (kept or not). */
async function hasEventsAfter(partition, after) {
  try {
    return (await page(partition, after, 1)).events.length > 0;
  } catch (error) {
    if (error instanceof ApiError && error.code === "events_expired") return true;
    throw error;
  }
}

/**
 * The seq of the newest event of a partition. The feed reads forward only, so the head is
 * found by galloping then bisecting on `after` with one-event reads: about 2 log2(head) tiny
 * requests, instead of reading the whole window.
 */
async function findHead(partition) {
  if (!(await hasEventsAfter(partition, 0))) return 0;
  let low = 0;
  let high = 64;
  while (await hasEventsAfter(partition, high)) {
    low = high;
    high *= 8;
  }
  while (high - low > 1) {
    const middle = Math.floor((low + high) / 2);
    if (await hasEventsAfter(partition, middle)) low = middle;
    else high = middle;
  }
  return high;
}

/**
 * Reads the events (after, head] of a partition, in pages; events the window no longer keeps
 * are skipped (the console never had them). Returns them and the seq read up to.
 */
async function readRange(partition, after, head) {
  const items = [];
  while (after < head) {
    try {
      const answer = await page(partition, after, Math.min(PAGE_LIMIT, head - after));
      if (answer.events.length === 0) break;
      items.push(...tag(partition, answer.events));
      after = answer.next_after;
    } catch (error) {
      if (!(error instanceof ApiError && error.code === "events_expired")) throw error;
      after = error.body.oldest_seq - 1;
    }
  }
  return { items, after };
}

async function follow(lane) {
  const waitMs = lane.length === 1 ? LONG_POLL_MS : Math.max(100, Math.floor(1000 / lane.length));
  for (;;) {
    for (const partition of lane) {
      try {
        const answer = await page(partition, cursors[partition], PAGE_LIMIT, waitMs);
        failure = null;
        cursors[partition] = answer.next_after;
        append(tag(partition, answer.events));
      } catch (error) {
        if (error instanceof ApiError && error.code === "events_expired") {
          // The console fell behind the window (a sleeping laptop, a long pause): say which
          // events it will never show, then go on from the oldest kept.
          const oldest = error.body.oldest_seq;
          append([{ gap: true, partition, from: cursors[partition] + 1, to: oldest - 1, at_ms: Date.now() }]);
          cursors[partition] = oldest - 1;
        } else {
          failure = error;
          await sleep(RETRY_MS);
        }
      }
    }
  }
}

async function start() {
  partitions = (await call(EVENT_PARTITIONS)).partitions;
  cursors = new Array(partitions).fill(0);
  const heads = await Promise.all([...Array(partitions).keys()].map(findHead));
  const backfill = [];
  for (let partition = 0; partition < partitions; partition++) {
    const from = Math.max(0, heads[partition] - BACKFILL);
    const read = await readRange(partition, from, heads[partition]);
    backfill.push(...read.items);
    cursors[partition] = Math.max(from, read.after);
  }
  backfill.sort((a, b) => a.at_ms - b.at_ms);
  append(backfill);
  const lanes = [];
  for (let partition = 0; partition < partitions; partition++) {
    (lanes[partition % LANES_MAX] ||= []).push(partition);
  }
  for (const lane of lanes) follow(lane);
}

/** Whether `event` is about `pool` (its own event, or a hold with an item in it). */
export function touchesPool(event, pool) {
  return event.pool === pool || (event.items || []).some((item) => item.pool === pool);
}

export const feed = {
  /** Starts following (once, retrying until stockd answers); resolves when the backfill is in. */
  start() {
    started ||= (async () => {
      for (;;) {
        try {
          await start();
          failure = null;
          return;
        } catch (error) {
          failure = error;
          await sleep(RETRY_MS);
        }
      }
    })();
    return started;
  },

  partitions: () => partitions,

  /** The buffered events, oldest first (gaps included, as `{gap: true, ...}`). */
  events: () => events,

  /** The last error while following, or null when the feed is being read. */
  failure: () => failure,

  /** `listener(newEvents)` after each batch; returns the unsubscribe function. */
  subscribe(listener) {
    listeners.add(listener);
    return () => listeners.delete(listener);
  },

  /**
   * Every kept event of one hold, oldest first: searched back from the head of its partition
   * until its `held` event (its first), at most SEARCH_PAGES_MAX pages. `complete` is false
   * when the search stopped before reaching it (window or search bound).
   */
  async historyOf(hold, signal) {
    const partition = hold.partition ?? 0;
    await feed.start();
    const read = (after, before) =>
      call(EVENTS, { query: { partition, after, limit: before - after }, signal });
    const found = new Map();
    let complete = false;
    // Pages (after, before], newest first.
    let before = cursors[partition];
    for (let pages = 0; pages < SEARCH_PAGES_MAX && before > 0 && !complete; pages++) {
      let after = Math.max(0, before - PAGE_LIMIT);
      let answer;
      try {
        answer = await read(after, before);
      } catch (error) {
        if (!(error instanceof ApiError && error.code === "events_expired")) throw error;
        // The window starts inside this page: read what is kept of it, and stop there.
        const oldest = error.body.oldest_seq;
        if (oldest > before) break;
        after = oldest - 1;
        answer = await read(after, before);
      }
      for (const event of answer.events) {
        if (event.hold_id !== hold.hold_id) continue;
        found.set(event.seq, { ...event, partition });
        if (event.type === "held") complete = true;
      }
      // Older events than the hold's creation cannot be about it (a second of clock slack).
      if (answer.events.length > 0 && answer.events[0].at_ms < hold.created_at_ms - 1000) break;
      before = after;
    }
    for (const event of events) {
      if (!event.gap && event.partition === partition && event.hold_id === hold.hold_id) {
        found.set(event.seq, event);
      }
    }
    return { events: [...found.values()].sort((a, b) => a.seq - b.seq), complete };
  },
};
