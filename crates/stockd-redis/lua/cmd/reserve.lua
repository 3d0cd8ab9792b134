-- cmd/reserve.lua: makes a hold, all or nothing, and parks it when stock is short and the
-- client asked to wait; routes a hold that lives in another partition or spans several.
-- Mirrors stockd-core src/state/cmd/reserve.rs.

-- An item as the server names it: a pool, a segment J >= 1 of a pool spread over partitions
-- (`POOL~J`, a pool of its own here), or segment 0 of one (`POOL~0`: the pool's own hash, named
-- so on purpose; a spread pool named plainly answers `segmented`, see S.check_reserve).
function S.item(word, qty)
    local base = string.match(word, '^(.*)~0$')
    if base then return { pool = base, qty = qty, segment_zero = true } end
    return { pool = word, qty = qty }
end

-- Words: HOLD USER CONFIRM TTL_MS WAIT_MS N POOL1 QTY1 ... ('-' for no user: ids start with a
-- letter or digit). Returns the request and the index of the word after it.
function S.parse_reserve(a, from)
    local request = {
        hold_id = a[from], user = a[from + 1] ~= '-' and a[from + 1] or nil,
        confirm = a[from + 2] == '1', ttl_ms = tonumber(a[from + 3]),
        wait_ms = tonumber(a[from + 4]), items = {},
    }
    local n = tonumber(a[from + 5])
    for i = 1, n do
        request.items[i] = S.item(a[from + 4 + 2 * i], tonumber(a[from + 5 + 2 * i]))
    end
    return request, from + 6 + 2 * n
end

-- Same user, same items in any order, same confirm flag. Items are compared by the pools the
-- client named: a segment of a spread pool is that pool (its retry may name another segment,
-- or none, if the pool was made again since).
function S.hold_matches(hold, request)
    if hold.user ~= request.user or hold.confirm ~= request.confirm
        or #hold.items ~= #request.items then
        return false
    end
    for _, item in ipairs(request.items) do
        local found = false
        for _, held in ipairs(hold.items) do
            if S.segment_of(held.pool) == S.segment_of(item.pool) and held.qty == item.qty then
                found = true
            end
        end
        if not found then return false end
    end
    return true
end

-- Item by item in the order given, the first failure wins. Reads only. Returns the pools read,
-- or the failure and the position of the item that failed.
function S.check_reserve(request)
    local pools = {}
    for i, item in ipairs(request.items) do
        -- Errors name the pool as the client did, a segment's too.
        local public = S.segment_of(item.pool)
        local pool = S.pool_get(item.pool)
        if not pool then
            return nil, S.error('pool_not_found', { { 'pool', public, 's' } }), i
        end
        -- A pool spread over partitions is reserved in one of its segments (the server routes
        -- there: `segmented` tells it the count); a segment a pool op froze takes nothing
        -- until the op is over (`frozen`). Neither is an answer for the client.
        if pool.spread and not item.segment_zero then
            return nil, S.error('segmented', { { 'pool', public, 's' },
                { 'segments', pool.segments, 'n' } }), i
        end
        if pool.frozen_by then
            return nil, S.error('frozen', { { 'pool', public, 's' },
                { 'op', pool.frozen_by, 'n' } }), i
        end
        if pool.per_user_limit and not request.user then
            return nil, S.error('user_required', { { 'pool', public, 's' } }), i
        end
        if pool.starts_at_ms and S.now < pool.starts_at_ms then
            return nil, S.error('sale_not_started', { { 'pool', public, 's' },
                { 'starts_at_ms', pool.starts_at_ms, 'n' } }), i
        end
        if pool.ends_at_ms and S.now >= pool.ends_at_ms then
            return nil, S.error('sale_ended', { { 'pool', public, 's' },
                { 'ends_at_ms', pool.ends_at_ms, 'n' } }), i
        end
        if pool.available < item.qty then
            return nil, S.error('insufficient_stock', { { 'pool', public, 's' },
                { 'available', pool.available, 'n' }, { 'requested', item.qty, 'n' } }), i
        end
        if pool.per_user_limit and request.user then
            local used = S.usage_get(item.pool, request.user)
            if used + item.qty > pool.per_user_limit then
                return nil, S.error('user_limit_exceeded', { { 'pool', public, 's' },
                    { 'limit', pool.per_user_limit, 'n' }, { 'used', used, 'n' },
                    { 'requested', item.qty, 'n' } }), i
            end
        end
        pools[i] = pool
    end
    return pools, nil, nil
end

-- One attempt, without waiting: replay, conflict, or check and take. Every pool is local.
-- `known`, when given, is {hold = the record as the caller just read it (or nil)}: read once.
function S.try_reserve(request, known)
    local hold
    if known then hold = known.hold else hold = S.hold_get(request.hold_id) end
    hold = S.settle(hold)
    if hold then
        if S.hold_matches(hold, request) then return S.hold_reply(hold, false) end
        return S.error('hold_id_conflict', { { 'hold_id', request.hold_id, 's' } })
    end
    local pools, failure = S.check_reserve(request)
    if failure then return failure end
    local words, crossed = S.take_units(request, pools)
    hold = {
        id = request.hold_id, status = 'held', user = request.user, items = request.items,
        confirm = request.confirm, created_at_ms = S.now, expires_at_ms = S.now + request.ttl_ms,
        unsaved = true,
    }
    S.hold_event('held', hold)
    S.emit_low_stock_of(crossed)
    if request.confirm then S.apply_confirmed(hold) end
    -- The new hold is written once, as it ends the command (confirmed already for confirm: true,
    -- which then never needs an expiry slot).
    local fields = { 'st', hold.status, 'it', table.concat(words, ' '),
        'cf', request.confirm and '1' or '0', 'c', S.now_text, 'e', S.int(hold.expires_at_ms) }
    if request.user then
        fields[#fields + 1] = 'u'
        fields[#fields + 1] = request.user
    end
    if hold.finished_at_ms then
        fields[#fields + 1] = 'f'
        fields[#fields + 1] = S.int(hold.finished_at_ms)
    end
    redis.call('HSET', S.key('hold', hold.id), unpack(fields))
    S.hold_index(hold.id, request.user, request.items)
    hold.unsaved = nil
    if hold.finished_at_ms then
        S.hold_keep(hold)
    else
        S.zadd(S.key('expiry'), S.int(hold.expires_at_ms), hold.id)
    end
    return S.hold_reply(hold, true)
end

-- reserve WORDS... ROUTE HOME LOCAL. ROUTE is 'only' (one partition), 'dir' (this partition is
-- the one the hold id hashes to; HOME is where the hold lives: here, or elsewhere through a
-- directory entry) or 'home' (sent here after {"moved"}). LOCAL is 1 when every pool of the hold
-- is in this partition; otherwise the answer is {"cross"} and the caller runs cross.lua's
-- protocol with this partition as home.
C.reserve = function(a)
    local n = #a
    if a[n - 2] == 'dir' and tonumber(a[n - 1]) ~= S.partition then
        local moved = S.dir_write(a[1], a[n - 1])
        if moved then return moved end
    end
    local request, next = S.parse_reserve(a, 1)
    local route, home, is_local = a[next], tonumber(a[next + 1]), a[next + 2] == '1'
    local hold = S.hold_get(request.hold_id)
    if hold and not S.visible(hold) then
        return { kind = 'raw', json = '{"cross":true}', stop = true }
    end
    if not hold and route == 'dir' then
        local moved = S.dir_lookup(request.hold_id)
        if moved then return moved end
        if home ~= S.partition then
            local key = S.key('dir', request.hold_id)
            redis.call('HSET', key, 'p', S.int(home))
            redis.call('PEXPIRE', key, S.int(S.dir_ttl_ms()))
            return S.moved(S.int(home))
        end
    end
    if not hold and not is_local then
        return { kind = 'raw', json = '{"cross":true}', stop = true }
    end
    if hold and hold.cross then
        -- A replay of a cross-partition hold: answered as any replay, nothing to take.
        hold = S.settle(hold)
        if S.hold_matches(hold, request) then return S.hold_reply(hold, false) end
        return S.error('hold_id_conflict', { { 'hold_id', request.hold_id, 's' } })
    end
    local reply = S.try_reserve(request, { hold = hold })
    if reply.kind == 'hold' and reply.created and not reply.apply then
        -- A hold this command made is the request itself, as the server sent it, held (or
        -- confirmed at once) at the call's time: `N` and that time are all the server needs to
        -- answer it (wire.rs). The hot path builds no JSON for its reply.
        return { kind = 'raw', json = 'N' .. S.now_text }
    end
    if request.wait_ms == 0 or reply.code ~= 'insufficient_stock' then
        return reply
    end
    -- Park the request on every pool it names: units coming back to any of them may be what it
    -- lacks. A full queue means the crowd is already larger than any stock that could come back
    -- soon; answer now rather than grow the queue.
    for _, item in ipairs(request.items) do
        if not S.waiter_room(S.key('waitq', item.pool)) then return reply end
    end
    local ticket = S.park('stock', a, S.now + request.wait_ms)
    for _, queue in ipairs(S.waiter_queues('stock', a)) do
        redis.call('ZADD', queue, S.int(ticket), S.int(ticket))
    end
    return { kind = 'wait', ticket = ticket }
end
