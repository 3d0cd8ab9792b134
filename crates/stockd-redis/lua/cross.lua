-- cross.lua: holds whose pools live in several partitions (Redis Cluster only). It has no
-- counterpart in stockd-core, where one state holds every pool: it is the protocol that makes a
-- multi-partition hold all-or-nothing, exactly once, whatever server dies between its steps.
--
-- The hold record lives in its home partition and is the coordinator: its status decides. Each
-- other partition keeps a part, `part:HOLD`, with the units the hold took from that partition's
-- pools. See docs/redis.md for the protocol and each failure window.
--
--   reserve:  x_begin (record 'pending') -> part_reserve in each partition -> x_commit ('held',
--             events) or, on a refusal, x_abort ('aborting') -> part_return everywhere -> x_forget.
--   later:    confirm / release / expiry / refund decide at home (status, events, `ap` = the part
--             transition still to apply, queued in `applyq`) -> part_apply in each partition ->
--             x_applied. A refund without restock applies 'writeoff' instead of 'refund'. A part
--             moves only forward (held -> confirmed -> refunded, held -> returned),
--             so applying twice, or an older and a newer transition in any order, is harmless.
--   sweepers: every server rolls forward what is in `applyq` past a grace time, and rolls back a
--             `pending` record older than S.PENDING_TIMEOUT_MS.

S.PENDING_TIMEOUT_MS = 10000
S.APPLY_GRACE_MS = 2000

-- Part hash fields: st ('held' | 'confirmed' | 'returned' | 'refunded'), u user, it items of this
-- partition ("pool qty generation ..."), at the attempt it belongs to. Each reserve of a hold id
-- is an attempt with its own id (a failed reserve is not remembered, so the same id may be
-- reserved again): a returned part is a tombstone of its attempt, so that a part_reserve of that
-- attempt arriving after the roll back takes nothing, while a later attempt starts afresh.
local function part_get(hold_id)
    local v = redis.call('HMGET', S.key('part', hold_id), 'st', 'u', 'it', 'at')
    if not v[1] then return nil end
    local items, words = {}, {}
    for w in string.gmatch(v[3], '%S+') do words[#words + 1] = w end
    for i = 1, #words, 3 do
        items[#items + 1] = { pool = words[i], qty = tonumber(words[i + 1]),
            generation = tonumber(words[i + 2]) }
    end
    return { status = v[1], user = v[2] or nil, items = items, attempt = v[4] }
end

local function part_finish(hold_id, status)
    local key = S.key('part', hold_id)
    redis.call('HSET', key, 'st', status)
    -- Kept as long as the longest a hold is kept, so a late step still finds it.
    redis.call('PEXPIRE', key, S.int(S.confirmed_retention_ms + S.hold_retention_ms + 86400000))
end

-- x_begin HOLD USER CONFIRM TTL_MS WAIT_MS N POOL QTY ...: the coordinator's record, 'pending'.
-- Answers the replay or conflict of an existing hold, {"begun": ATTEMPT} to go on (also for a
-- pending hold whose reserve is retried: its parts are idempotent), or {"aborting"}.
C.x_begin = function(a)
    local request = S.parse_reserve(a, 1)
    local hold = S.settle(S.hold_get(request.hold_id))
    if hold and hold.status == 'aborting' then return { kind = 'raw', json = '{"aborting":true}' } end
    if hold and hold.status ~= 'pending' then
        if S.hold_matches(hold, request) then return S.hold_reply(hold, false) end
        return S.error('hold_id_conflict', { { 'hold_id', request.hold_id, 's' } })
    end
    if hold and not S.hold_matches(hold, request) then
        return S.error('hold_id_conflict', { { 'hold_id', request.hold_id, 's' } })
    end
    local attempt
    if hold then
        attempt = redis.call('HGET', S.key('hold', request.hold_id), 'at')
    else
        attempt = S.int(S.partition) .. '.' .. S.int(redis.call('HINCRBY', S.meta, 'attempt', 1))
        local words = {}
        for _, item in ipairs(request.items) do
            words[#words + 1] = item.pool .. ' ' .. S.int(item.qty) .. ' 0'
        end
        local key = S.key('hold', request.hold_id)
        redis.call('HSET', key, 'st', 'pending', 'x', '1', 'it', table.concat(words, ' '),
            'cf', request.confirm and '1' or '0', 'c', S.int(S.now),
            'e', S.int(S.now + request.ttl_ms), 'at', attempt)
        if request.user then redis.call('HSET', key, 'u', request.user) end
        -- Indexed at once, listed only once decided (a pending record is not a hold yet).
        S.hold_index(request.hold_id, request.user, request.items)
        redis.call('ZADD', S.key('pendingq'), S.int(S.now), request.hold_id)
    end
    return { kind = 'raw', json = '{"begun":' .. S.json_string(attempt) .. '}' }
end

-- part_reserve CHECK_ONLY HOLD ATTEMPT USER N POOL QTY INDEX ...: checks this partition's items
-- in the order given (the first failure wins, reported with the item's index in the hold) and,
-- unless CHECK_ONLY, takes the units and writes the part. Idempotent: this attempt's part already
-- there answers ok, or {"aborted"} when it is a tombstone; another attempt's live part means this
-- attempt was rolled back ({"aborted"}); another attempt's tombstone is replaced.
C.part_reserve = function(a)
    local check_only, hold_id, attempt = a[1] == '1', a[2], a[3]
    local user = a[4] ~= '-' and a[4] or nil
    local n = tonumber(a[5])
    local existing = part_get(hold_id)
    if existing and not check_only then
        local mine = existing.attempt == attempt
        if existing.status == 'returned' and mine then
            return { kind = 'raw', json = '{"aborted":true}' }
        end
        if existing.status ~= 'returned' then
            if mine then return { kind = 'raw', json = '{"part":"ok"}' } end
            return { kind = 'raw', json = '{"aborted":true}' }
        end
    end
    local request = { hold_id = hold_id, user = user, items = {} }
    local indexes = {}
    for i = 1, n do
        request.items[i] = { pool = a[3 + 3 * i], qty = tonumber(a[4 + 3 * i]) }
        indexes[i] = tonumber(a[5 + 3 * i])
    end
    local pools, failure, failed_at = S.check_reserve(request)
    if failure then
        failure.fields[#failure.fields + 1] = { 'index', indexes[failed_at], 'n' }
        return failure
    end
    if check_only then return { kind = 'raw', json = '{"part":"ok"}' } end
    -- A reserve that fails fires no low_stock: the pools that crossed are kept in the part (`ls`)
    -- and fired in this partition's feed when the commit reaches it (part_apply), or dropped by
    -- a roll back.
    local words, crossed = S.take_units(request, pools)
    local key = S.key('part', hold_id)
    redis.call('DEL', key)
    redis.call('HSET', key, 'st', 'held', 'it', table.concat(words, ' '), 'at', attempt)
    if user then redis.call('HSET', key, 'u', user) end
    if #crossed > 0 then redis.call('HSET', key, 'ls', table.concat(crossed, ' ')) end
    return { kind = 'raw', json = '{"part":"ok"}' }
end

-- x_commit HOLD: the reserve succeeded everywhere: 'pending' -> 'held' (and 'confirmed' for
-- confirm: true), with its events. {"aborted"} if a sweeper rolled it back meanwhile.
C.x_commit = function(a)
    local hold = S.hold_get(a[1])
    if not hold or hold.status ~= 'pending' then
        return { kind = 'raw', json = '{"aborted":true}' }
    end
    redis.call('ZREM', S.key('pendingq'), hold.id)
    hold.status = 'held'
    redis.call('HSET', S.key('hold', hold.id), 'st', 'held')
    if not hold.confirm then
        redis.call('ZADD', S.key('expiry'), S.int(hold.expires_at_ms), hold.id)
    end
    S.hold_event('held', hold)
    if hold.confirm then
        S.apply_confirmed(hold)
    else
        -- The parts learn of the commit too: they fire the low_stock their units caused.
        S.queue_apply(hold, 'commit', false)
    end
    return S.hold_reply(hold, true)
end

-- x_abort HOLD: marks a pending record 'aborting' (no commit can follow) and answers its items,
-- so the caller returns every part; {"gone"} when there is nothing to roll back.
C.x_abort = function(a)
    local hold = S.hold_get(a[1])
    if not hold or (hold.status ~= 'pending' and hold.status ~= 'aborting') then
        return { kind = 'raw', json = '{"gone":true}' }
    end
    redis.call('HSET', S.key('hold', hold.id), 'st', 'aborting')
    local attempt = redis.call('HGET', S.key('hold', hold.id), 'at')
    return { kind = 'raw', json = '{"aborting":' .. S.items_json(hold.items) .. ',"attempt":'
        .. S.json_string(attempt) .. '}' }
end

-- x_forget HOLD: every part is returned; the failed reserve is not remembered.
C.x_forget = function(a)
    local hold = S.hold_get(a[1])
    if hold and hold.status == 'aborting' then
        S.hold_forget(hold)
    end
    redis.call('ZREM', S.key('pendingq'), a[1])
    return { kind = 'deleted' }
end

-- part_apply HOLD OP ATTEMPT: moves this partition's part forward to what OP (commit | confirm |
-- return | refund | writeoff: a refund without restock) decided at home, first firing the low_stock its reserve caused (`ls`) unless
-- this is the roll back of attempt ATTEMPT, which drops it. Rolling back, a partition without
-- the attempt's part gets a tombstone of it (replacing another attempt's tombstone).
C.part_apply = function(a)
    local hold_id, op, attempt = a[1], a[2], a[3]
    local part = part_get(hold_id)
    local foreign_tombstone = part and part.status == 'returned' and attempt
        and part.attempt ~= attempt
    if not part or foreign_tombstone then
        if op == 'return' and attempt then
            local key = S.key('part', hold_id)
            redis.call('DEL', key)
            redis.call('HSET', key, 'st', 'returned', 'it', '', 'at', attempt)
            part_finish(hold_id, 'returned')
        end
        return { kind = 'deleted' }
    end
    local crossed = redis.call('HGET', S.key('part', hold_id), 'ls')
    if crossed then
        redis.call('HDEL', S.key('part', hold_id), 'ls')
        if not attempt then
            local ids = {}
            for id in string.gmatch(crossed, '%S+') do ids[#ids + 1] = id end
            S.emit_low_stock_of(ids)
        end
    end
    local refund = op == 'refund' or op == 'writeoff'
    if part.status == 'held' and (op == 'confirm' or refund) then
        S.move_units(part.items, 'held', 'sold')
        part.status = 'confirmed'
        part_finish(hold_id, 'confirmed')
    end
    if part.status == 'held' and op == 'return' then
        S.move_units(part.items, 'held', 'available', part.user)
        part_finish(hold_id, 'returned')
    end
    if part.status == 'confirmed' and refund then
        if op == 'refund' then
            S.move_units(part.items, 'sold', 'available', part.user)
        else
            S.write_off_units(part.items, part.user)
        end
        part_finish(hold_id, 'refunded')
    end
    return { kind = 'deleted' }
end

-- part_refundable HOLD: pool_deleted when a pool of this part was deleted since the hold took
-- from it (refund's check, before home decides).
C.part_refundable = function(a)
    local part = part_get(a[1])
    local deleted = part and S.first_deleted_pool(part.items)
    if deleted then return S.error('pool_deleted', { { 'pool', deleted, 's' } }) end
    return { kind = 'raw', json = '{"part":"ok"}' }
end

-- x_applied HOLD OP: every part has OP; forget it unless a newer transition replaced it.
C.x_applied = function(a)
    local key = S.key('hold', a[1])
    if redis.call('HGET', key, 'ap') == a[2] then
        redis.call('HDEL', key, 'ap')
        redis.call('ZREM', S.key('applyq'), a[1])
    end
    return { kind = 'deleted' }
end

-- x_state HOLD: the record and the transition still to apply, for a sweeper rolling forward.
C.x_state = function(a)
    local hold = S.hold_get(a[1])
    if not hold then
        redis.call('ZREM', S.key('applyq'), a[1])
        return S.hold_not_found(a[1])
    end
    local ap = redis.call('HGET', S.key('hold', a[1]), 'ap')
    return { kind = 'raw', json = '{"state":' .. S.hold_json(hold) .. ',"apply":'
        .. (ap and S.json_string(ap) or 'null') .. '}' }
end

-- Decides a transition of a cross-partition hold at home: the parts follow (S.hold_reply
-- carries `apply`, and `applyq` keeps it until x_applied). `due_now` queues it for the next
-- sweep at once (an expiry, which no request is waiting to apply).
function S.queue_apply(hold, op, due_now)
    redis.call('HSET', S.key('hold', hold.id), 'ap', op)
    local at = S.now
    if due_now then at = S.now - S.APPLY_GRACE_MS end
    redis.call('ZADD', S.key('applyq'), S.int(at), hold.id)
    hold.apply = op
end

-- Part of a sweep: cross-partition work past its grace time, for the sweeping server to finish.
function S.cross_due()
    local forward = redis.call('ZRANGEBYSCORE', S.key('applyq'), '-inf',
        S.int(S.now - S.APPLY_GRACE_MS), 'LIMIT', '0', '100')
    local back = redis.call('ZRANGEBYSCORE', S.key('pendingq'), '-inf',
        S.int(S.now - S.PENDING_TIMEOUT_MS), 'LIMIT', '0', '100')
    return forward, back
end
