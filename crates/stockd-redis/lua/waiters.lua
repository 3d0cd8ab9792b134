-- waiters.lua: requests parked until stock or a lock comes back, across every stockd server.
-- Mirrors stockd-core: State::serve_freed, serve_pool_waiters, serve_lock_waiters and the
-- waiter deadlines of State::tick.
--
-- A parked request is a hash `waiter:TICKET` (its command words, its deadline, and its answer
-- once served) and one entry per pool (or lock) queue, scored by ticket: tickets come from one
-- counter per partition, so the queues are in arrival order across servers. Units that come
-- back are offered to waiters first, inside the very call that freed them; the server that
-- parked the request is woken over pub/sub and collects the answer with `wait_end`. A waiter
-- past its deadline is skipped (its server's last attempt decides), and one whose server died
-- is forgotten when its hash expires, a minute after its deadline (S.WAITER_GRACE_MS, library.rs).

-- Whether a queue has room; a full queue is first cleared of waiters already gone.
function S.waiter_room(queue)
    if redis.call('ZCARD', queue) < S.WAITERS_PER_KEY_MAX then return true end
    for _, ticket in ipairs(redis.call('ZRANGE', queue, '0', '-1')) do
        local answered = redis.call('HMGET', S.key('waiter', ticket), 'd', 'r')
        if not answered[1] or answered[2] then redis.call('ZREM', queue, ticket) end
    end
    return redis.call('ZCARD', queue) < S.WAITERS_PER_KEY_MAX
end

-- Stores a parked command; returns its ticket.
function S.park(kind, words, deadline_ms)
    local ticket = redis.call('HINCRBY', S.meta, 'waiter', 1)
    local key = S.key('waiter', S.int(ticket))
    redis.call('HSET', key, 'k', kind, 'w', table.concat(words, ' '), 'd', S.int(deadline_ms))
    redis.call('PEXPIRE', key, S.int(deadline_ms - S.now + S.WAITER_GRACE_MS))
    return ticket
end

local function split(text)
    local words = {}
    for w in string.gmatch(text, '%S+') do words[#words + 1] = w end
    return words
end

-- The queues a parked command sits in: a reserve, on each pool it names and on its hold id (a
-- retry of a waiting reserve parks too, and is answered as soon as the hold exists).
local function waiter_queues(kind, words)
    if kind == 'lock' then return { S.key('lockq', words[1]) } end
    local request = S.parse_reserve(words, 1)
    local queues = {}
    for i, item in ipairs(request.items) do queues[i] = S.key('waitq', item.pool) end
    queues[#queues + 1] = S.key('holdq', request.hold_id)
    return queues
end
S.waiter_queues = waiter_queues

local function answer(ticket, kind, words, reply)
    local key = S.key('waiter', ticket)
    redis.call('HSET', key, 'r', S.reply_json(reply))
    for _, queue in ipairs(waiter_queues(kind, words)) do redis.call('ZREM', queue, ticket) end
    S.woken[#S.woken + 1] = ticket
end

-- Serves the waiters of all freed pools together, oldest first: pool by pool, units freed on
-- several pools at once could go to a later waiter of one pool before an earlier one of another.
local function serve_pool_waiters(pools)
    local candidates, seen = {}, {}
    for _, pool in ipairs(pools) do
        for _, ticket in ipairs(redis.call('ZRANGE', S.key('waitq', pool), '0', '-1')) do
            if not seen[ticket] then
                seen[ticket] = true
                candidates[#candidates + 1] = tonumber(ticket)
            end
        end
    end
    table.sort(candidates)
    for _, number in ipairs(candidates) do
        -- Every candidate needs units from one of these pools; none left, none served.
        local exhausted = true
        for _, pool in ipairs(pools) do
            local left = S.pool_get(pool)
            if not left or left.available > 0 then exhausted = false end
        end
        if exhausted then break end
        local ticket = S.int(number)
        local waiter = redis.call('HMGET', S.key('waiter', ticket), 'k', 'w', 'd', 'r')
        if not waiter[1] then
            for _, pool in ipairs(pools) do redis.call('ZREM', S.key('waitq', pool), ticket) end
        elseif not waiter[4] and tonumber(waiter[3]) > S.now then
            local words = split(waiter[2])
            local reply = S.try_reserve((S.parse_reserve(words, 1)))
            -- A segment frozen by a pool op is short for now, as one without stock.
            if reply.code ~= 'insufficient_stock' and reply.code ~= 'frozen' then
                answer(ticket, 'stock', words, reply)
            end
        end
    end
end

-- Calls serve(ticket, words) for each waiter of `queue` in ticket order that is not past its
-- deadline, until serve returns true; a waiter gone (its hash expired) or already answered
-- leaves the queue on the way.
local function serve_queue(queue, serve)
    for _, ticket in ipairs(redis.call('ZRANGE', queue, '0', '-1')) do
        local waiter = redis.call('HMGET', S.key('waiter', ticket), 'k', 'w', 'd', 'r')
        if not waiter[1] or waiter[4] then
            redis.call('ZREM', queue, ticket)
        elseif tonumber(waiter[3]) > S.now then
            if serve(ticket, split(waiter[2])) then return end
        end
    end
end

-- The first live waiter of a freed lock gets it; the rest keep waiting.
local function serve_lock_waiters(name)
    serve_queue(S.key('lockq', name), function(ticket, words)
        local reply = S.try_lock_acquire(words)
        if reply.code ~= 'lock_held' then answer(ticket, 'lock', words, reply) end
        return true
    end)
end

-- Answers the reserves parked for a hold that now exists: each a retry of the reserve that
-- created it (a replay) or another request with its id (a conflict), as try_reserve says.
local function serve_hold_waiters(hold_id)
    serve_queue(S.key('holdq', hold_id), function(ticket, words)
        answer(ticket, 'stock', words, S.try_reserve((S.parse_reserve(words, 1))))
        return false
    end)
end

-- Notes that a hold parked reserves wait for was just created (apply's Held, S.take_units).
function S.note_created_hold(hold_id)
    if redis.call('EXISTS', S.key('holdq', hold_id)) == 1 then
        S.created_holds[#S.created_holds + 1] = hold_id
    end
end

-- Serves waiters of pools, locks and holds that got something back. Serving one may free more
-- (a waiter's request can expire a stale hold), so this loops until nothing is left to serve.
function S.serve_freed()
    while #S.freed_pools > 0 or #S.freed_locks > 0 or #S.created_holds > 0 do
        if #S.created_holds > 0 then
            serve_hold_waiters(table.remove(S.created_holds))
        end
        if #S.freed_pools > 0 then
            local pools, seen = {}, {}
            for _, pool in ipairs(S.freed_pools) do
                if not seen[pool] then
                    seen[pool] = true
                    pools[#pools + 1] = pool
                end
            end
            table.sort(pools)
            S.freed_pools = {}
            serve_pool_waiters(pools)
        end
        if #S.freed_locks > 0 then
            serve_lock_waiters(table.remove(S.freed_locks))
        end
    end
end

-- wait_end TICKET KIND WORDS...: the parked command's final answer: the one it was served, or
-- one last attempt now that its wait is over (success included). The server that parked it
-- calls this once, when woken or at its deadline; it passes the command again, so the answer
-- does not depend on the waiter's hash still being there.
C.wait_end = function(a)
    local ticket, kind = a[1], a[2]
    local words = {}
    for i = 3, #a do words[#words + 1] = a[i] end
    local key = S.key('waiter', ticket)
    local served = redis.call('HGET', key, 'r')
    redis.call('DEL', key)
    for _, queue in ipairs(waiter_queues(kind, words)) do redis.call('ZREM', queue, ticket) end
    if served then return { kind = 'raw', json = served } end
    if kind == 'lock' then return S.try_lock_acquire(words) end
    return S.try_reserve((S.parse_reserve(words, 1)))
end

-- wait_cancel TICKET KIND WORDS...: the client went away; forget the waiter if not yet served.
C.wait_cancel = function(a)
    local ticket, kind = a[1], a[2]
    local words = {}
    for i = 3, #a do words[#words + 1] = a[i] end
    redis.call('DEL', S.key('waiter', ticket))
    for _, queue in ipairs(waiter_queues(kind, words)) do redis.call('ZREM', queue, ticket) end
    return { kind = 'deleted' }
end
