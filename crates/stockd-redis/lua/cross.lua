-- cross.lua: holds whose pools live in several partitions (Redis Cluster only). It has no
-- counterpart in stockd-core, where one state holds every pool: it is the protocol that makes a
-- multi-partition hold all-or-nothing, exactly once, whatever server dies between its steps and
-- however late, twice or out of order a step arrives. docs/redis.md ("Holds over several
-- partitions") is its specification as a state machine, and crates/stockd-crosscheck explores a
-- model of it exhaustively: a change here changes both.
--
-- The hold record lives in its home partition and is the coordinator: its status decides. Each
-- partition of the hold's items keeps a part, `part:HOLD`, with the units the hold took there.
--
--   reserve:  x_attempt (the hold id's partition) -> x_begin(A) (record 'pending') ->
--             part_reserve(A) in each partition -> x_commit(A) ('held', events) or, on a refusal,
--             x_abort(A) ('aborting') -> part_apply(return, A) everywhere -> x_forget(A).
--   later:    confirm / release / expiry / refund decide at home (status, events, `ap` = the part
--             transition still to apply, queued in `applyq`) -> part_apply(OP, A) in each
--             partition -> x_applied(A, OP). A refund without restock applies 'writeoff'.
--   sweepers: every server rolls forward what is in `applyq` past a grace time, rolls back a
--             `pending` or `aborting` record older than S.PENDING_TIMEOUT_MS, and returns a held
--             part whose home has no record of its attempt (`partq`, x_owner).
--
-- Attempts are the fence. Each reserve that starts afresh gets an attempt number from the
-- counter of the partition the hold id hashes to, so the attempts of one hold id are totally
-- ordered. Every step names its attempt, and every participant refuses a step of an attempt
-- other than the one it holds: a late step of an old attempt changes nothing.

-- The protocol's timings (S.PENDING_TIMEOUT_MS, S.APPLY_GRACE_MS, S.PART_CHECK_MS: how long
-- after a part takes units, and then how often, its home is asked whether it still owns it) and
-- S.CROSS_DUE_MAX (work per sweep call) are library.rs's, where the tests read them too.

-- An attempt's rank: its number. Attempts written by stockd_v2 (`PARTITION.N`, ordered only
-- within one home) rank 0, below every later attempt.
function S.attempt_rank(attempt)
    if not attempt or attempt == '' or string.find(attempt, '.', 1, true) then return 0 end
    return tonumber(attempt) or 0
end

-- Part hash fields: st ('held' | 'confirmed' | 'returned' | 'refunded'), u user, it items of
-- this partition ("pool qty generation ..."), at the attempt whose units these are, hi the
-- highest attempt that ever wrote the part (hi >= at), hp the home partition, ls the pools whose
-- low_stock the reserve crossed (fired at commit).
local function part_get(hold_id)
    local v = redis.call('HMGET', S.key('part', hold_id), 'st', 'u', 'it', 'at', 'hi', 'hp')
    if not v[1] then return nil end
    local items, words = {}, {}
    for w in string.gmatch(v[3], '%S+') do words[#words + 1] = w end
    for i = 1, #words, 3 do
        items[#items + 1] = { pool = words[i], qty = tonumber(words[i + 1]),
            generation = tonumber(words[i + 2]) }
    end
    local attempt = v[4] or ''
    local hi = math.max(S.attempt_rank(v[5] or ''), S.attempt_rank(attempt))
    return { status = v[1], user = v[2] or nil, items = items, attempt = attempt, hi = hi,
        home = v[6] or nil }
end

local function part_finish(hold_id, status)
    local key = S.key('part', hold_id)
    redis.call('HSET', key, 'st', status)
    redis.call('ZREM', S.key('partq'), hold_id)
    -- Kept as long as the longest a hold is kept, so a late step still finds it.
    redis.call('PEXPIRE', key, S.int(S.confirmed_retention_ms + S.hold_retention_ms + 86400000))
end

local function raw(json)
    return { kind = 'raw', json = json }
end

local ABORTED = '{"aborted":true}'

-- x_attempt HOLD: a new attempt number for HOLD, from the counter of this partition (the one
-- the hold id hashes to, whatever its home): {"next_attempt": "N"}.
C.x_attempt = function()
    return raw('{"next_attempt":"' .. S.int(redis.call('HINCRBY', S.meta, 'attempt', 1)) .. '"}')
end

-- The name a request item has in a record (segment 0 of a spread pool as `POOL~0`).
local function wire_name(item)
    return item.segment_zero and (item.pool .. '~0') or item.pool
end

-- Whether a record (matching `request` by its pools, S.hold_matches) names each pool as the
-- request does: the same segment of each spread pool, or the pool itself for each.
local function same_wire_names(hold, request)
    for _, item in ipairs(request.items) do
        local found = false
        for _, held in ipairs(hold.items) do
            if held.pool == wire_name(item) and held.qty == item.qty then found = true end
        end
        if not found then return false end
    end
    return true
end

-- x_begin HOLD USER CONFIRM TTL_MS WAIT_MS N POOL QTY ... ATTEMPT: the coordinator's record,
-- 'pending(ATTEMPT)' ('-': a new attempt from this partition's counter, when the hold id hashes
-- here). Answers the replay or conflict of an existing hold, {"begun": A} to go on (A is the
-- attempt under way when a pending record is there: the request joins it), or {"aborting"}
-- (retry once the roll back is over).
C.x_begin = function(a)
    local request, next = S.parse_reserve(a, 1)
    local candidate = a[next]
    local hold = S.settle(S.hold_get(request.hold_id))
    if hold and hold.status == 'aborting' then return raw('{"aborting":true}') end
    if hold and (hold.status ~= 'pending' or not S.hold_matches(hold, request)) then
        if hold.status ~= 'pending' and S.hold_matches(hold, request) then
            return S.hold_reply(hold, false)
        end
        return S.error('hold_id_conflict', { { 'hold_id', request.hold_id, 's' } })
    end
    if hold then
        -- The request joins the attempt under way only if it names the same segments: a server
        -- that did not know a pool is spread names the pool itself, and that attempt's parts
        -- (and the record's items, which decide where its steps go) are not where this
        -- request's would be. It waits for that attempt to end instead, as for a roll back.
        if not same_wire_names(hold, request) then return raw('{"aborting":true}') end
        return raw('{"begun":' .. S.json_string(hold.attempt) .. '}')
    end
    local attempt = candidate
    if attempt == '-' then
        attempt = S.int(redis.call('HINCRBY', S.meta, 'attempt', 1))
    else
        -- An attempt the orphan sweep declared dead here (x_owner) never begins.
        local dead = S.attempt_rank(redis.call('GET', S.key('xdead', request.hold_id)) or '')
        if S.attempt_rank(attempt) <= dead then return raw('{"aborting":true}') end
    end
    -- Segment 0 of a spread pool keeps its `~0` here, so that the hold's events can say
    -- which segment gave its units (the record moves none: its parts do).
    local words = {}
    for _, item in ipairs(request.items) do
        words[#words + 1] = wire_name(item) .. ' ' .. S.int(item.qty) .. ' 0'
    end
    local key = S.key('hold', request.hold_id)
    redis.call('HSET', key, 'st', 'pending', 'x', '1', 'it', table.concat(words, ' '),
        'cf', request.confirm and '1' or '0', 'c', S.int(S.now),
        'e', S.int(S.now + request.ttl_ms), 'at', attempt)
    if request.user then redis.call('HSET', key, 'u', request.user) end
    -- Indexed at once, listed only once decided (a pending record is not a hold yet).
    S.hold_index(request.hold_id, request.user, request.items)
    redis.call('ZADD', S.key('pendingq'), S.int(S.now), request.hold_id)
    return raw('{"begun":' .. S.json_string(attempt) .. '}')
end

-- part_reserve CHECK_ONLY HOLD ATTEMPT HOME USER N POOL QTY INDEX ...: checks this partition's
-- items in the order given (the first failure wins, reported with the item's index in the
-- hold) and, unless CHECK_ONLY, takes the units and writes the part held(ATTEMPT). A repeat of
-- the attempt that holds the part answers ok; {"aborted"} when that attempt was rolled back
-- here, when a newer attempt has been here (ATTEMPT <= hi), or when an older attempt's units are
-- still held here. A refusal writes nothing.
C.part_reserve = function(a)
    local check_only, hold_id, attempt, home = a[1] == '1', a[2], a[3], a[4]
    local user = a[5] ~= '-' and a[5] or nil
    local n = tonumber(a[6])
    if not check_only then
        local existing = part_get(hold_id)
        if existing and existing.attempt == attempt then
            if existing.status == 'returned' then return raw(ABORTED) end
            return raw('{"part":"ok"}')
        end
        if existing and (S.attempt_rank(attempt) <= existing.hi or existing.status == 'held') then
            return raw(ABORTED)
        end
    end
    local request = { hold_id = hold_id, user = user, items = {} }
    local indexes = {}
    for i = 1, n do
        request.items[i] = S.item(a[4 + 3 * i], tonumber(a[5 + 3 * i]))
        indexes[i] = tonumber(a[6 + 3 * i])
    end
    local pools, failure, failed_at = S.check_reserve(request)
    if failure then
        failure.fields[#failure.fields + 1] = { 'index', indexes[failed_at], 'n' }
        return failure
    end
    if check_only then return raw('{"part":"ok"}') end
    -- A reserve that fails fires no low_stock: the pools that crossed are kept in the part (`ls`)
    -- and fired in this partition's feed when the commit reaches it (part_apply), or dropped by
    -- a roll back.
    local words, crossed = S.take_units(request, pools)
    local key = S.key('part', hold_id)
    redis.call('DEL', key)
    redis.call('HSET', key, 'st', 'held', 'it', table.concat(words, ' '), 'at', attempt,
        'hi', attempt, 'hp', home)
    if user then redis.call('HSET', key, 'u', user) end
    if #crossed > 0 then redis.call('HSET', key, 'ls', table.concat(crossed, ' ')) end
    redis.call('ZADD', S.key('partq'), S.int(S.now + S.PART_CHECK_MS), hold_id)
    return raw('{"part":"ok"}')
end

-- x_commit HOLD ATTEMPT: the reserve of ATTEMPT succeeded everywhere: 'pending(ATTEMPT)' ->
-- 'held' (and 'confirmed' for confirm: true), with its events. The hold is created now: its
-- `created_at` and `expires_at` move to now and now + its ttl (a retry may join an attempt begun
-- seconds before an outage, past the hold's deadline). The hold decided by this very attempt
-- answers its replay (a concurrent copy of the request committed first); anything else is
-- {"aborted"}: rolled back, or another attempt.
C.x_commit = function(a)
    local hold, attempt = S.settle(S.hold_get(a[1])), a[2]
    if hold and hold.attempt == attempt and S.visible(hold) then
        return S.hold_reply(hold, false)
    end
    if not hold or hold.status ~= 'pending' or hold.attempt ~= attempt then
        return raw(ABORTED)
    end
    redis.call('ZREM', S.key('pendingq'), hold.id)
    hold.status = 'held'
    local ttl_ms = hold.expires_at_ms - hold.created_at_ms
    hold.created_at_ms, hold.expires_at_ms = S.now, S.now + ttl_ms
    redis.call('HSET', S.key('hold', hold.id), 'st', 'held', 'c', S.int(hold.created_at_ms),
        'e', S.int(hold.expires_at_ms))
    if not hold.confirm then
        S.zadd(S.key('expiry'), S.int(hold.expires_at_ms), hold.id)
    end
    S.hold_event('held', hold)
    -- The part in home's own partition fires the low_stock its units caused now, right after
    -- `held` (and before `confirmed`), in the order a hold of one partition has them.
    local part_key = S.key('part', hold.id)
    local part = redis.call('HMGET', part_key, 'at', 'ls')
    if part[1] == attempt and part[2] then
        redis.call('HDEL', part_key, 'ls')
        local ids = {}
        for id in string.gmatch(part[2], '%S+') do ids[#ids + 1] = id end
        S.emit_low_stock_of(ids)
    end
    if hold.confirm then
        S.apply_confirmed(hold)
    else
        -- The parts learn of the commit too: they fire the low_stock their units caused.
        S.queue_apply(hold, 'commit', false)
    end
    return S.hold_reply(hold, true)
end

-- x_abort HOLD ATTEMPT: marks the record 'aborting' (no commit can follow) when it is
-- pending(ATTEMPT) or aborting(ATTEMPT) ('*': whichever attempt, a sweeper's roll back), and
-- answers its items and attempt, so the caller returns every part; {"gone"} when there is
-- nothing of that attempt to roll back (a stale `pendingq` entry goes too).
C.x_abort = function(a)
    local hold, attempt = S.hold_get(a[1]), a[2]
    local rolling = hold and (hold.status == 'pending' or hold.status == 'aborting')
    if not rolling then
        redis.call('ZREM', S.key('pendingq'), a[1])
        return raw('{"gone":true}')
    end
    if attempt ~= '*' and hold.attempt ~= attempt then return raw('{"gone":true}') end
    redis.call('HSET', S.key('hold', hold.id), 'st', 'aborting')
    return raw('{"aborting":' .. S.items_json(hold.items) .. ',"attempt":'
        .. S.json_string(hold.attempt) .. '}')
end

-- Declares ATTEMPT of HOLD dead at its home: no x_begin of it (or of an older attempt) makes a
-- record again. Kept as long as a part is.
local function attempt_dead(hold_id, attempt)
    local key = S.key('xdead', hold_id)
    if S.attempt_rank(attempt) > S.attempt_rank(redis.call('GET', key) or '') then
        redis.call('SET', key, attempt,
            'PX', S.int(S.confirmed_retention_ms + S.hold_retention_ms + 86400000))
    end
end

-- x_forget HOLD ATTEMPT: every part of ATTEMPT is returned; the failed reserve is not
-- remembered, but its attempt is declared dead: a late copy of its x_begin (a duplicated or
-- delayed delivery) would otherwise make a record of it again, which a copy of its request
-- still running could then commit over parts already returned (found by crates/stockd-crosscheck).
-- A record of another attempt stays, with its `pendingq` entry.
C.x_forget = function(a)
    local hold = S.hold_get(a[1])
    if hold and hold.status == 'aborting' and hold.attempt == a[2] then
        S.hold_forget(hold)
        attempt_dead(hold.id, hold.attempt)
        hold = nil
    end
    if not hold then redis.call('ZREM', S.key('pendingq'), a[1]) end
    return { kind = 'deleted' }
end

-- part_apply HOLD OP ATTEMPT ROLLBACK: moves this partition's part of ATTEMPT forward to what OP
-- (commit | confirm | return | refund | writeoff: a refund without restock) decided at home,
-- first firing the low_stock its reserve caused (`ls`) unless ROLLBACK is 1 (the roll back of a
-- reserve, which drops it). A part of another attempt is never touched. A return that finds no
-- part of ATTEMPT leaves a tombstone of it (hi = ATTEMPT), so that a part_reserve of ATTEMPT
-- arriving later takes nothing; a newer attempt's part or tombstone stays as it is.
C.part_apply = function(a)
    local hold_id, op, attempt, rollback = a[1], a[2], a[3], a[4] == '1'
    local key = S.key('part', hold_id)
    local part = part_get(hold_id)
    if not part or part.attempt ~= attempt then
        if op == 'return' and (not part or S.attempt_rank(attempt) > part.hi) then
            if part and part.status == 'held' then
                -- An older attempt's units: they stay its own; only the fence moves.
                redis.call('HSET', key, 'hi', attempt)
            else
                redis.call('DEL', key)
                redis.call('HSET', key, 'it', '', 'at', attempt, 'hi', attempt)
                part_finish(hold_id, 'returned')
            end
        end
        return { kind = 'deleted' }
    end
    local crossed = redis.call('HGET', key, 'ls')
    if crossed then
        redis.call('HDEL', key, 'ls')
        if not rollback then
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

-- x_owner HOLD ATTEMPT: whether the record here is of ATTEMPT ({"owner": true}), for the orphan
-- sweep of a part held in another partition. When it is not (the record is gone or of another
-- attempt: only a home that lost data answers that for a part still held), ATTEMPT is declared
-- dead here (`xdead`), so that a late x_begin of it can never make a record the part's return
-- would then betray.
C.x_owner = function(a)
    local hold_id, attempt = a[1], a[2]
    local attempt_here = redis.call('HGET', S.key('hold', hold_id), 'at')
    if attempt_here == attempt then return raw('{"owner":true}') end
    attempt_dead(hold_id, attempt)
    return raw('{"owner":false}')
end

-- part_refundable HOLD: pool_deleted when a pool of this part was deleted since the hold took
-- from it (refund's check, before home decides).
C.part_refundable = function(a)
    local part = part_get(a[1])
    local deleted = part and S.first_deleted_pool(part.items)
    if deleted then return S.error('pool_deleted', { { 'pool', deleted, 's' } }) end
    return { kind = 'raw', json = '{"part":"ok"}' }
end

-- x_applied HOLD OP ATTEMPT: every part of ATTEMPT has OP; forget it unless a newer transition
-- replaced it (or the record is of another attempt).
C.x_applied = function(a)
    local hold = S.hold_get(a[1])
    if hold and hold.ap == a[2] and hold.attempt == a[3] then
        redis.call('HDEL', S.key('hold', hold.id), 'ap')
        redis.call('ZREM', S.key('applyq'), hold.id)
        hold.ap = nil
        if hold.finished_at_ms then S.hold_keep(hold) end
    end
    return { kind = 'deleted' }
end

-- x_state HOLD: the record, the transition still to apply and the attempt, for a sweeper
-- rolling forward.
C.x_state = function(a)
    local hold = S.hold_get(a[1])
    if not hold then
        redis.call('ZREM', S.key('applyq'), a[1])
        return S.hold_not_found(a[1])
    end
    local ap = hold.ap
    return { kind = 'raw', json = '{"state":' .. S.hold_json(hold) .. ',"apply":'
        .. (ap and S.json_string(ap) or 'null') .. ',"attempt":'
        .. S.json_string(hold.attempt or '') .. '}' }
end

-- Decides a transition of a cross-partition hold at home: the parts follow (S.hold_reply
-- carries `apply`, and `applyq` keeps it until x_applied). `due_now` queues it for the next
-- sweep at once (an expiry, which no request is waiting to apply).
function S.queue_apply(hold, op, due_now)
    redis.call('HSET', S.key('hold', hold.id), 'ap', op)
    hold.ap = op
    local at = S.now
    if due_now then at = S.now - S.APPLY_GRACE_MS end
    redis.call('ZADD', S.key('applyq'), S.int(at), hold.id)
    hold.apply = op
end

-- Every held part of the partition due for its ownership check now (after an operator accepted
-- a dataset that lost changes, a home may have lost the holds of parts held here).
function S.parts_due_now()
    redis.call('ZUNIONSTORE', S.key('partq'), '1', S.key('partq'), 'WEIGHTS', '0')
end

-- Part of a sweep: cross-partition work past its grace time, for the sweeping server to finish:
-- decided transitions to roll forward, reserves to roll back, and held parts whose home is to be
-- asked whether it still owns them (each "ATTEMPT HOME HOLD", and checked again a minute later:
-- moved on here, so the sweeps of other servers do not ask at the same time).
function S.cross_due()
    local max = S.int(S.CROSS_DUE_MAX)
    local forward = redis.call('ZRANGEBYSCORE', S.key('applyq'), '-inf',
        S.int(S.now - S.APPLY_GRACE_MS), 'LIMIT', '0', max)
    local back = redis.call('ZRANGEBYSCORE', S.key('pendingq'), '-inf',
        S.int(S.now - S.PENDING_TIMEOUT_MS), 'LIMIT', '0', max)
    local parts = {}
    local due = redis.call('ZRANGEBYSCORE', S.key('partq'), '-inf', S.now_text, 'LIMIT', '0', max)
    for _, hold_id in ipairs(due) do
        local part = part_get(hold_id)
        if part and part.status == 'held' then
            redis.call('ZADD', S.key('partq'), S.int(S.now + S.PART_CHECK_MS), hold_id)
            parts[#parts + 1] = part.attempt .. ' ' .. (part.home or '') .. ' ' .. hold_id
        else
            redis.call('ZREM', S.key('partq'), hold_id)
        end
    end
    return forward, back, parts
end
