-- apply.lua: the transitions that change records, and the events they emit. Mirrors stockd-core
-- src/state/apply.rs (apply_record's Held, Confirmed, Released/Expired, low-stock, usage). The
-- commands in cmd/ decide; these apply what they decided, and must never decide anything.

-- Appends one event to the partition's feed: seq from the partition's counter, in the same
-- atomic call as the change, so an acknowledged change's event is never lost.
-- `fields` as S.json_object takes them.
function S.emit(kind, fields)
    local body = S.json_object(fields)
    S.emit_json(kind, #body > 2 and (',' .. string.sub(body, 2, -2)) or '')
end

-- The same with the event's own fields already as JSON (`,"name":value...`): the hot path.
-- Layout 1: one stream entry per event, id `0-SEQ`, field `e` the event's JSON, trimmed to the
-- newest EVENT_RETENTION_MAX entries. Layout 2: the call's events are kept (S.batch) and
-- written by S.flush_events as one entry.
function S.emit_json(kind, tail)
    S.seq = S.seq + 1
    S.seq_dirty = true
    S.published = true
    if S.layout == '2' then
        S.batch[#S.batch + 1] = kind .. tail
        return
    end
    local seq = S.int(S.seq)
    redis.call('XADD', S.key('events'), 'MAXLEN', S.event_retention_max_text, '0-' .. seq, 'e',
        '{"seq":' .. seq .. ',"at_ms":' .. S.now_text .. ',"type":"' .. kind .. '"' .. tail .. '}')
end

-- Layout 2: a call's events as one stream entry, id `0-LAST_SEQ`, fields `at` (the call's time,
-- every event's at_ms) and `b`, the events in seq order, each its type and its own fields as
-- JSON (`held,"hold_id":...`), one per line (no event's JSON holds a raw newline). The entry
-- names its last seq, so its first is LAST_SEQ + 1 minus its event count. Entries whose events
-- are all older than the last EVENT_RETENTION_MAX seqs are trimmed (MINID); the feed (main.lua,
-- `events`) hides the older events of the entry on the window's edge: the newest
-- EVENT_RETENTION_MAX events are kept, as layout 1 keeps them (S.feed_window_start counts them
-- across the seq's jump at an accept).
function S.flush_events()
    if #S.batch == 0 then return end
    redis.call('XADD', S.key('events'), 'MINID', '0-' .. S.int(S.feed_window_start(S.seq)),
        '0-' .. S.int(S.seq),
        'at', S.now_text, 'b', table.concat(S.batch, '\n'))
    S.batch = {}
end

function S.emit_low_stock(pool)
    S.emit('low_stock', {
        { 'pool', pool.id, 's' }, { 'available', pool.available, 'n' },
        { 'total', pool.total, 'n' }, { 'low_stock_threshold', pool.low_stock_threshold, 'n' },
    })
end

-- low_stock fires when available goes from above the threshold to at or below it.
-- A pool spread over partitions fires its low_stock from a pool op that counts the whole pool
-- (segments.lua), never from one segment's counts.
function S.low_stock_crossed(pool, before)
    if pool.spread then return false end
    local t = pool.low_stock_threshold
    return t ~= nil and before > t and pool.available <= t
end

-- Takes the checked units: available -> held, and the user's usage. Returns the items as the
-- hold (or part) record stores them, and the ids of the pools whose available crossed their
-- low-stock threshold (S.emit_low_stock_of fires for them, once the change's own event is out).
function S.take_units(request, pools)
    S.note_created_hold(request.hold_id)
    local words, befores = {}, {}
    for i, item in ipairs(request.items) do
        local pool = pools[i]
        befores[i] = pool.available
        pool.available = pool.available - item.qty
        pool.held = pool.held + item.qty
        S.pool_put_counts(pool)
        S.usage_add(item.pool, request.user, item.qty)
        words[#words + 1] = item.pool .. ' ' .. S.int(item.qty) .. ' ' .. S.int(pool.generation)
    end
    local crossed = {}
    for i, pool in ipairs(pools) do
        if S.low_stock_crossed(pool, befores[i]) then crossed[#crossed + 1] = pool.id end
    end
    return words, crossed
end

-- Fires low_stock for each pool named, with its counters as they are now.
-- A hold over several partitions fires at its commit what its reserve crossed before: a pool no
-- longer at or below its threshold by then (a restock since, or another threshold) fires
-- nothing, so that every low_stock shows its pool low.
function S.emit_low_stock_of(pool_ids)
    for _, id in ipairs(pool_ids) do
        local pool = S.pool_get(id)
        local t = pool and pool.low_stock_threshold
        if t and pool.available <= t then S.emit_low_stock(pool) end
    end
end

function S.usage_give_back(pool_id, user, qty)
    if not user then return end
    local key = S.key('usage', pool_id)
    local used = tonumber(redis.call('HGET', key, user) or '0')
    if used <= qty then
        redis.call('HDEL', key, user)
    else
        redis.call('HSET', key, user, S.int(used - qty))
    end
end

-- `extra`: more of the event's fields as JSON (`,"name":value...`), or nil. A `held` event also
-- carries the hold's created_at_ms: a hold over several partitions is created at x_begin and
-- held at x_commit, so the event's at_ms is not it there.
-- The fields every event of a hold carries are made once per hold and call (a hold confirmed on
-- creation has two events), again only if its deadline moved.
function S.hold_event(kind, hold, extra)
    if hold.event_for ~= hold.expires_at_ms then
        local user = ''
        if hold.user then user = ',"user":"' .. hold.user .. '"' end
        hold.event_text = ',"hold_id":"' .. hold.id .. '"' .. user .. ',"items":'
            .. S.hold_items_json(hold) .. S.segments_json(hold.items) .. ',"expires_at_ms":'
            .. S.int(hold.expires_at_ms)
        hold.event_for = hold.expires_at_ms
    end
    local created = ''
    if kind == 'held' then created = ',"created_at_ms":' .. S.int(hold.created_at_ms) end
    S.emit_json(kind, hold.event_text .. created .. (extra or ''))
end

function S.retention_ms(status)
    if status == 'confirmed' then return S.confirmed_retention_ms end
    return S.hold_retention_ms
end

-- A finished hold is kept for its retention: past it, it is gone for every command (S.hold_get
-- forgets it by the call's clock, as the core does), and the key's expiry frees the memory an
-- hour later (S.FORGOTTEN_KEY_MARGIN_MS, library.rs: a duration, so it does not depend on which
-- clock `now` came from).

function S.hold_finish(hold, status, finished_at_ms)
    hold.status = status
    hold.finished_at_ms = finished_at_ms
    -- A hold made by this very command is written whole by it, once (cmd/reserve.lua).
    if hold.unsaved then return end
    redis.call('HSET', S.key('hold', hold.id), 'st', status, 'f', S.int(finished_at_ms))
    S.hold_keep(hold)
    -- A hold confirmed on creation was never in the expiry set.
    if not (status == 'confirmed' and hold.confirm) then
        S.zrem(S.key('expiry'), hold.id)
    end
end

-- The memory of a finished hold is freed an hour after its retention ends; the sweep forgets it
-- (record and index entries) when its retention ends, through the `forget` set.
-- A cross-partition hold whose parts still have a decision to apply is kept until they have it
-- (x_applied keeps it again then): without its record, a part would look orphaned.
function S.hold_keep(hold)
    local forget_at_ms = hold.finished_at_ms + S.retention_ms(hold.status)
    S.zadd(S.key('forget'), S.int(forget_at_ms), hold.id)
    if hold.ap then
        redis.call('PERSIST', S.key('hold', hold.id))
        return
    end
    local keep_ms = forget_at_ms - S.now
    redis.call('PEXPIRE', S.key('hold', hold.id),
        S.int(math.max(keep_ms, 0) + S.FORGOTTEN_KEY_MARGIN_MS))
end

-- Moves the units of `items` from one counter of their pools to another ('available', 'held',
-- 'sold'). Units going back to available take the user's usage with them and free the pool for
-- its waiters. A pool deleted (or made anew) since the units were taken has nowhere to put them
-- and is skipped (a held pool cannot be deleted; refunds check first, see S.first_deleted_pool).
function S.move_units(items, from, to, user)
    for _, item in ipairs(items) do
        local pool = S.pool_get(item.pool)
        if pool and (item.generation == nil or pool.generation == item.generation) then
            pool[from] = pool[from] - item.qty
            pool[to] = pool[to] + item.qty
            S.pool_put_counts(pool)
            if to == 'available' then
                S.usage_give_back(item.pool, user, item.qty)
                S.note_freed_pool(item.pool)
            end
        end
    end
end

-- Takes sold units out of their pools (a refund without restock): sold and total both shrink,
-- available does not move; the user's usage comes back as with any refund. Skips a pool deleted
-- or made anew, as S.move_units does.
function S.write_off_units(items, user)
    for _, item in ipairs(items) do
        local pool = S.pool_get(item.pool)
        if pool and (item.generation == nil or pool.generation == item.generation) then
            pool.sold = pool.sold - item.qty
            pool.total = pool.total - item.qty
            S.pool_put_counts(pool)
            S.usage_give_back(item.pool, user, item.qty)
            S.note_freed_pool(item.pool)
        end
    end
end

-- The first pool of `items` deleted (or deleted and made anew) since the units were taken, if any.
function S.first_deleted_pool(items)
    for _, item in ipairs(items) do
        local pool = S.pool_get(item.pool)
        if not pool or pool.generation ~= item.generation then return (S.segment_of(item.pool)) end
    end
    return nil
end

-- held -> confirmed: held units become sold (in each partition's part, for a cross hold).
function S.apply_confirmed(hold)
    if hold.cross then
        S.queue_apply(hold, 'confirm', false)
    else
        S.move_units(hold.items, 'held', 'sold')
    end
    S.hold_finish(hold, 'confirmed', S.now)
    S.hold_event('confirmed', hold)
end

-- held -> released or expired: held units go back to available, and the user's usage with them.
function S.apply_returned(hold, status)
    if hold.cross then
        S.queue_apply(hold, 'return', status == 'expired')
    else
        S.move_units(hold.items, 'held', 'available', hold.user)
    end
    -- An expired hold finished at its deadline, however late the sweep ran.
    local finished_at_ms = S.now
    if status == 'expired' then finished_at_ms = math.min(hold.expires_at_ms, S.now) end
    S.hold_finish(hold, status, finished_at_ms)
    S.hold_event(status, hold)
end
