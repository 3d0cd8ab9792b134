-- segments.lua: a segmented pool spread over a Redis Cluster's partitions (Redis only, like
-- cross.lua: stockd-core keeps every pool whole). Segment 0 is the pool's own hash, `pool:POOL`,
-- in the pool's partition K0, with the pool's rules and its op record; segment J >= 1 is the
-- sub-pool `pool:POOL~J` in the partition the dataset's placement gives it (keys.rs
-- `Placement`; `~` is never in a pool id), with its own
-- counts, the pool's generation and a copy of the rules a reserve checks. Every unit of the pool
-- is in exactly one segment, and a hold takes each segmented pool's units from one segment: a
-- sub-pool is a pool to every command that moves units (reserve, confirm, release, expiry,
-- refund, the cross-partition parts), so those need nothing of this file.
--
-- What changes the pool as a whole (creating it, a PUT, a restock, a delete, and moving units
-- between segments for a reserve short in its own) is a **pool op**, coordinated by segment 0's
-- partition, as crates/stockd-crosscheck's `poolop` model specifies and explores:
--
--   pop_begin (K0: the op record `pop:POOL`, op number from the meta's `pop` counter, segment 0
--   frozen, its counts read) -> seg_freeze in each other segment (frozen, counts read) -> the
--   server plans per-segment deltas from what the freeze read -> pop_plan (K0: the plan
--   recorded: the decision; before it the op is rolled back, after it rolled forward) ->
--   seg_apply in each other segment (applied once; still frozen) -> pop_end (K0: segment 0's
--   part, the pool's one event, segment 0 unfrozen, the record gone: the op takes effect) ->
--   seg_unfreeze in each other segment.
--
-- A frozen segment refuses reserves (`frozen`: the server waits for the op, then sends the
-- reserve again); confirm, release, expiry and refund still run there: they only ever give
-- units back to available, so a plan made from the freeze's reads stays valid. Each segment
-- keeps `ao`, the newest op it applied or closed: a step of an op at or below it changes
-- nothing, so a late or repeated step never applies twice or freezes again. A deleted
-- sub-pool leaves a tombstone with `ao` only (S.SEGMENT_TOMBSTONE_MS) for that fence.
--
-- Sweepers: `popq` (K0) lists op records by start; one older than S.PENDING_TIMEOUT_MS is
-- rolled back (no plan: pop_abort, then seg_unfreeze everywhere) or forward (seg_apply
-- everywhere, pop_end, seg_unfreeze). `segfz` (each partition) lists frozen sub-pools; one
-- frozen longer than that is unfrozen once K0 says (pop_owner) that it has no record of the op.

function S.segment_id(pool, segment)
    if segment == 0 then return pool end
    return pool .. '~' .. S.int(segment)
end

-- The pool a segment's id belongs to, and the segment's number.
function S.segment_of(id)
    local pool, segment = string.match(id, '^(.*)~(%d+)$')
    if pool then return pool, tonumber(segment) end
    return id, 0
end

-- A segment's state as pop_begin and seg_freeze answer it, `null` when it does not exist.
local function segment_json(id)
    local pool = S.pool_get(id)
    if not pool then return 'null' end
    return S.json_object({
        { 'g', pool.generation, 'n' }, { 'total', pool.total, 'n' },
        { 'available', pool.available, 'n' }, { 'held', pool.held, 'n' },
        { 'sold', pool.sold, 'n' }, { 'per_user_limit', pool.per_user_limit, 'n' },
        { 'starts_at_ms', pool.starts_at_ms, 'n' }, { 'ends_at_ms', pool.ends_at_ms, 'n' },
        { 'low_stock_threshold', pool.low_stock_threshold, 'n' },
        { 'segments', pool.segments, 'n' }, { 'spread', pool.spread, 'b' },
        { 'low_fired', pool.low_fired, 'b' },
    })
end

local function raw(json)
    return { kind = 'raw', json = json }
end

-- A command on a whole pool that this partition cannot answer alone: a pool op is under way on
-- it (`frozen`: the server waits for it, then asks again), or it is spread over partitions
-- (`segmented`: the server collects its segments, or runs a pool op). Nil otherwise.
function S.whole_pool_guard(id)
    local op = redis.call('HGET', S.key('pop', id), 'o')
    if op then return S.error('frozen', { { 'pool', id, 's' }, { 'op', tonumber(op), 'n' } }) end
    return S.spread_guard(id)
end

-- For reads: a pool spread over partitions is read by collecting its segments (`segmented`).
-- A pool an op is making does not exist until the op ends.
function S.spread_guard(id)
    local pool = S.pool_get(id)
    if pool and pool.spread then
        return S.error('segmented', { { 'pool', id, 's' }, { 'segments', pool.segments, 'n' } })
    end
    return nil
end

local function fence_of(key)
    local v = redis.call('HMGET', key, 'fz', 'ao')
    return tonumber(v[1] or '0'), tonumber(v[2] or '0')
end

-- Freezes (or unfreezes, op 0) a segment in the call's copy too.
local function set_frozen(id, op)
    local key = S.key('pool', id)
    if op == 0 then
        redis.call('HDEL', key, 'fz')
        redis.call('ZREM', S.key('segfz'), id)
    else
        redis.call('HSET', key, 'fz', S.int(op))
        local _, segment = S.segment_of(id)
        if segment ~= 0 then redis.call('ZADD', S.key('segfz'), S.now_text, id) end
    end
    local pool = S.pools[id]
    if pool then pool.frozen_by = op ~= 0 and op or nil end
end

-- pop_begin POOL KIND ARGS...: starts a pool op at K0, unless one is under way (`busy`, with
-- its number). Answers the op's number, the generation a pool it makes will have (when segment 0
-- does not exist; 0 otherwise) and segment 0's state. ARGS start with the segment count the
-- server assumes; a restock's go on with DELTA REQUEST_ID: one whose request id is remembered
-- starts nothing (`replayed`, or request_id_conflict).
C.pop_begin = function(a)
    local id, kind = a[1], a[2]
    local key = S.key('pop', id)
    local busy = redis.call('HGET', key, 'o')
    if busy then return raw('{"busy":' .. busy .. '}') end
    if kind == 'restock' and a[5] ~= '-' then
        local first = S.restock_request_get(a[5])
        if first then
            if first.pool ~= id or first.delta ~= tonumber(a[4]) then
                return S.request_id_conflict(a[5], first)
            end
            return raw('{"replayed":true}')
        end
    end
    local op = redis.call('HINCRBY', S.meta, 'pop', 1)
    local args = {}
    for i = 3, #a do args[#args + 1] = a[i] end
    -- A pool made by the op gets its generation now: the other segments are made before
    -- segment 0.
    local generation = 0
    if not S.pool_get(id) then generation = redis.call('HINCRBY', S.meta, 'generation', 1) end
    redis.call('HSET', key, 'o', S.int(op), 'k', kind, 'w', table.concat(args, ' '),
        'at', S.now_text, 'g', S.int(generation))
    redis.call('ZADD', S.key('popq'), S.now_text, id)
    if S.pool_get(id) then set_frozen(id, op) end
    return raw('{"begun":' .. S.int(op) .. ',"generation":' .. S.int(generation)
        .. ',"segment":' .. segment_json(id) .. '}')
end

-- seg_freeze POOL SEGMENT OP: freezes segment SEGMENT >= 1 for OP (a placeholder when it does
-- not exist yet, so that nothing is made there behind the op's back) and answers its state;
-- `fenced` for an op at or below the newest it saw, `busy` when another op froze it.
C.seg_freeze = function(a)
    local id, op = S.segment_id(a[1], tonumber(a[2])), tonumber(a[3])
    local frozen, seen = fence_of(S.key('pool', id))
    if op <= seen then return raw('{"fenced":true}') end
    if frozen ~= 0 and frozen ~= op then return raw('{"busy":' .. S.int(frozen) .. '}') end
    set_frozen(id, op)
    return raw('{"segment":' .. segment_json(id) .. '}')
end

-- pop_plan POOL OP PLAN: records the op's plan (the server's, from what the freeze read): the
-- decision. Refused (`aborted`) unless the record is OP's and has no plan yet.
C.pop_plan = function(a)
    local key = S.key('pop', a[1])
    local v = redis.call('HMGET', key, 'o', 'p')
    if v[1] ~= a[2] or v[2] then return raw('{"aborted":true}') end
    local words = {}
    for i = 3, #a do words[#words + 1] = a[i] end
    redis.call('HSET', key, 'p', table.concat(words, ' '))
    return raw('{"planned":true}')
end

-- Applies one segment's part of a plan: `delta DA DT GEN LIMIT STARTS ENDS FLOOR CEILING`
-- (available and total move by DA and DT; the rules and generation are the pool's, the
-- low-stock watch the plan's; '-' for none), on a segment that exists or not yet, or `delete`.
local function apply_part(id, words, op)
    local key = S.key('pool', id)
    if words[1] == 'delete' then
        -- A sub-pool leaves a tombstone that keeps the fence; the segment is gone for every
        -- command. Segment 0 needs none: its steps are fenced by the op record.
        local pool = S.pool_get(id)
        redis.call('DEL', key, S.key('usage', id))
        S.pool_forget(id)
        local _, segment = S.segment_of(id)
        if segment ~= 0 then
            redis.call('HSET', key, 'ao', S.int(op))
            redis.call('PEXPIRE', key, S.int(S.SEGMENT_TOMBSTONE_MS))
            redis.call('ZREM', S.key('segfz'), id)
        end
        if pool then S.note_freed_pool(id) end
        return
    end
    local pool = S.pool_get(id)
    if not pool then
        redis.call('PERSIST', key)
        pool = { id = id, total = 0, available = 0, held = 0, sold = 0, segments = 1 }
    end
    pool.generation = tonumber(words[4])
    pool.available = pool.available + tonumber(words[2])
    pool.total = pool.total + tonumber(words[3])
    pool.per_user_limit = S.num(words[5] ~= '-' and words[5])
    pool.starts_at_ms = S.num(words[6] ~= '-' and words[6])
    pool.ends_at_ms = S.num(words[7] ~= '-' and words[7])
    pool.floor = S.num(words[8] ~= '-' and words[8])
    pool.ceiling = S.num(words[9] ~= '-' and words[9])
    redis.call('HSET', key, 'g', S.int(pool.generation), 'ao', S.int(op))
    for _, rule in ipairs({ { 'l', words[5] }, { 'sa', words[6] }, { 'ea', words[7] },
        { 'lo', words[8] }, { 'hi', words[9] } }) do
        if rule[2] == '-' then
            redis.call('HDEL', key, rule[1])
        else
            redis.call('HSET', key, rule[1], rule[2])
        end
    end
    S.pools[id] = pool
    S.pool_put_counts(pool)
    if tonumber(words[2]) > 0 then S.note_freed_pool(id) end
end

-- seg_apply POOL SEGMENT OP PART...: applies the plan's part for segment SEGMENT >= 1, once
-- (fenced by op); the segment stays frozen until seg_unfreeze.
C.seg_apply = function(a)
    local id, op = S.segment_id(a[1], tonumber(a[2])), tonumber(a[3])
    local _, seen = fence_of(S.key('pool', id))
    if op <= seen then return raw('{"applied":true}') end
    local words = {}
    for i = 4, #a do words[#words + 1] = a[i] end
    apply_part(id, words, op)
    return raw('{"applied":true}')
end

-- seg_unfreeze POOL SEGMENT OP: unfreezes segment SEGMENT if OP froze it, and fences OP out
-- (a late seg_freeze of it must not freeze it again).
C.seg_unfreeze = function(a)
    local id, op = S.segment_id(a[1], tonumber(a[2])), tonumber(a[3])
    local key = S.key('pool', id)
    local frozen, seen = fence_of(key)
    if frozen == op then set_frozen(id, 0) end
    if op > seen then redis.call('HSET', key, 'ao', S.int(op)) end
    -- A placeholder that never became a segment leaves a tombstone, as a delete does.
    if not S.pool_get(id) then redis.call('PEXPIRE', key, S.int(S.SEGMENT_TOMBSTONE_MS)) end
    if frozen == op and S.pool_get(id) then S.note_freed_pool(id) end
    return raw('{"unfrozen":true}')
end

-- pop_end POOL OP PART THRESHOLD SEGMENTS FIRED EVENT...: at K0, the op takes effect: segment
-- 0's part of the plan (PART, one argument, as seg_apply's words), the pool's low-stock
-- threshold, segment count and whether it is now at or below it (FIRED 1), the pool's one event
-- (EVENT: `upserted TOTAL AVAILABLE DELTA LOW`, `restocked DELTA TOTAL AVAILABLE REQUEST_ID
-- LOW`, `deleted TOTAL AVAILABLE`, `low TOTAL AVAILABLE` (low_stock alone), or `none`; LOW 1
-- fires low_stock after it; the counts are the whole pool's, the server's sum of what the
-- freeze read and the plan), segment 0 unfrozen, the record gone. Only OP's planned record:
-- anything else is a late or repeated step (`done`).
C.pop_end = function(a)
    local id, op = a[1], tonumber(a[2])
    local key = S.key('pop', id)
    local v = redis.call('HMGET', key, 'o', 'p', 'k', 'w')
    if tonumber(v[1] or '0') ~= op or not v[2] then return raw('{"done":true}') end
    local words = {}
    for w in string.gmatch(a[3], '%S+') do words[#words + 1] = w end
    apply_part(id, words, op)
    local pool = S.pool_get(id)
    if pool then
        local pool_key = S.key('pool', id)
        pool.low_stock_threshold = S.num(a[4] ~= '-' and a[4])
        if a[4] == '-' then redis.call('HDEL', pool_key, 'th') else redis.call('HSET', pool_key, 'th', a[4]) end
        pool.segments = tonumber(a[5])
        redis.call('HSET', pool_key, 'sg', a[5])
        pool.low_fired = a[6] == '1'
        if pool.low_fired then redis.call('HSET', pool_key, 'lf', '1') else redis.call('HDEL', pool_key, 'lf') end
        redis.call('HSET', pool_key, 'sp', '1')
        pool.spread = true
        redis.call('ZADD', S.key('pools'), '0', id)
        set_frozen(id, 0)
    else
        redis.call('ZREM', S.key('pools'), id)
    end
    local event = {}
    for i = 7, #a do event[#event + 1] = a[i] end
    if event[1] == 'upserted' then
        S.emit('pool_upserted', { { 'pool', id, 's' }, { 'available', tonumber(event[3]), 'n' },
            { 'total', tonumber(event[2]), 'n' }, { 'delta', tonumber(event[4]), 'n' } })
        if event[5] == '1' then
            S.emit('low_stock', { { 'pool', id, 's' }, { 'available', tonumber(event[3]), 'n' },
                { 'total', tonumber(event[2]), 'n' },
                { 'low_stock_threshold', pool.low_stock_threshold, 'n' } })
        end
    elseif event[1] == 'restocked' then
        local fields = { { 'pool', id, 's' }, { 'available', tonumber(event[4]), 'n' },
            { 'total', tonumber(event[3]), 'n' }, { 'delta', tonumber(event[2]), 'n' } }
        if event[5] ~= '-' then
            S.remember_restock(event[5], tonumber(event[2]), id)
            fields[#fields + 1] = { 'request_id', event[5], 's' }
        end
        S.emit('restocked', fields)
        if event[6] == '1' then
            S.emit('low_stock', { { 'pool', id, 's' }, { 'available', tonumber(event[4]), 'n' },
                { 'total', tonumber(event[3]), 'n' },
                { 'low_stock_threshold', pool.low_stock_threshold, 'n' } })
        end
    elseif event[1] == 'low' then
        S.emit('low_stock', { { 'pool', id, 's' }, { 'available', tonumber(event[3]), 'n' },
            { 'total', tonumber(event[2]), 'n' },
            { 'low_stock_threshold', pool.low_stock_threshold, 'n' } })
    elseif event[1] == 'deleted' then
        S.emit('pool_deleted', { { 'pool', id, 's' }, { 'available', tonumber(event[3]), 'n' },
            { 'total', tonumber(event[2]), 'n' } })
    end
    redis.call('DEL', key)
    redis.call('ZREM', S.key('popq'), id)
    return raw('{"ended":true}')
end

-- pop_abort POOL OP|*: rolls back an op that has no plan yet (the record gone, segment 0
-- unfrozen and fenced): answers `aborted` with its number, for the caller to unfreeze the other
-- segments; or the planned op to roll forward (`planned`), or `none`.
C.pop_abort = function(a)
    local id = a[1]
    local key = S.key('pop', id)
    local v = redis.call('HMGET', key, 'o', 'p', 'k', 'w')
    if not v[1] or (a[2] ~= '*' and a[2] ~= v[1]) then return raw('{"none":true}') end
    if v[2] then
        return raw('{"planned":' .. v[1] .. ',"kind":"' .. v[3] .. '","args":'
            .. cjson.encode(v[4]) .. ',"plan":' .. cjson.encode(v[2]) .. '}')
    end
    local op = tonumber(v[1])
    redis.call('DEL', key)
    redis.call('ZREM', S.key('popq'), id)
    local pool_key = S.key('pool', id)
    local frozen, seen = fence_of(pool_key)
    if frozen == op then set_frozen(id, 0) end
    if S.pool_get(id) then
        if op > seen then redis.call('HSET', pool_key, 'ao', S.int(op)) end
        S.note_freed_pool(id)
    end
    return raw('{"aborted":' .. S.int(op) .. ',"kind":"' .. v[3] .. '","args":'
        .. cjson.encode(v[4]) .. '}')
end

-- pop_owner POOL OP: whether K0 still records op OP (reads only).
C.pop_owner = function(a)
    local op = redis.call('HGET', S.key('pop', a[1]), 'o')
    return raw('{"owner":' .. ((op == a[2]) and 'true' or 'false') .. '}')
end

-- seg_get POOL SEGMENT: segment SEGMENT's state (reads only), for the pool's collect.
C.seg_get = function(a)
    local id = S.segment_id(a[1], tonumber(a[2]))
    local pool = S.pool_get(id)
    local frozen = pool and pool.frozen_by or 0
    return raw('{"segment":' .. segment_json(id) .. ',"frozen":' .. S.int(frozen)
        .. ',"version":' .. S.int(pool and pool.version or 0) .. '}')
end

-- A spread pool's low-stock watch (the demarcation of docs/redis.md): while the pool is above
-- its threshold each segment has a floor, the floors adding up to one more than the threshold,
-- so that no segment below its floor means the pool is above the threshold; while at or below,
-- ceilings adding up to the threshold. A change that takes a segment past its watch is recorded
-- (`lowq`, for the sweep, and the command's answer, for its server): a `low` pool op then
-- counts the whole pool as of one instant, fires low_stock or re-arms, and sets new watches.
function S.low_watch(pool)
    local crossed = (pool.floor and pool.available < pool.floor)
        or (pool.ceiling and pool.available > pool.ceiling)
    if not crossed or not S.low_checks then return end
    local public = S.segment_of(pool.id)
    for _, id in ipairs(S.low_checks) do
        if id == public then return end
    end
    S.low_checks[#S.low_checks + 1] = public
    redis.call('ZADD', S.key('lowq'), S.now_text, public)
end

-- For the sweep: pools whose op is older than S.PENDING_TIMEOUT_MS (K0), and frozen sub-pools
-- whose freeze is that old (`POOL SEGMENT OP`), for the server to roll back or forward, or ask
-- K0 about.
function S.segments_due()
    -- Also the pools whose low-stock watch a change crossed (`lowq`), for a `low` pool op.
    local max = S.int(S.CROSS_DUE_MAX)
    local ops = redis.call('ZRANGEBYSCORE', S.key('popq'), '-inf',
        S.int(S.now - S.PENDING_TIMEOUT_MS), 'LIMIT', '0', max)
    local frozen = {}
    local due = redis.call('ZRANGEBYSCORE', S.key('segfz'), '-inf',
        S.int(S.now - S.PENDING_TIMEOUT_MS), 'LIMIT', '0', max)
    for _, id in ipairs(due) do
        local op = fence_of(S.key('pool', id))
        if op == 0 then
            redis.call('ZREM', S.key('segfz'), id)
        else
            local pool, segment = S.segment_of(id)
            frozen[#frozen + 1] = pool .. ' ' .. S.int(segment) .. ' ' .. S.int(op)
        end
    end
    local low = redis.call('ZRANGEBYSCORE', S.key('lowq'), '-inf', S.now_text, 'LIMIT', '0', max)
    for _, id in ipairs(low) do redis.call('ZREM', S.key('lowq'), id) end
    return ops, frozen, low
end
