-- holds.lua: confirm, release, refund, extend, get_hold.
-- Mirrors stockd-core: State::confirm, release, refund, extend and apply_record's Confirmed,
-- Released, Refunded and Extended. Each first finds and settles the hold (expired if past its
-- deadline; forgotten past retention, which Redis does by the key's expiry). Words: HOLD ROUTE
-- ... (ROUTE as in reserve.lua). A hold over several partitions decides here too; its parts
-- follow (cross.lua).

-- confirm HOLD ROUTE
C.confirm = function(a)
    local hold, other = S.find_hold(a[1], a[2])
    if not hold then return other end
    if hold.status == 'held' then
        S.apply_confirmed(hold)
        return S.hold_reply(hold, false)
    elseif hold.status == 'confirmed' then
        return S.hold_reply(hold, false)
    end
    return S.error('hold_' .. hold.status, { { 'hold_id', hold.id, 's' } })
end

-- release HOLD ROUTE
C.release = function(a)
    local hold, other = S.find_hold(a[1], a[2])
    if not hold then return other end
    if hold.status == 'held' then
        S.apply_returned(hold, 'released')
        return S.hold_reply(hold, false)
    elseif hold.status == 'released' or hold.status == 'expired' then
        -- Released, or expired: the stock is back either way.
        return S.hold_reply(hold, false)
    end
    return S.error('hold_' .. hold.status, { { 'hold_id', hold.id, 's' } })
end

-- refund HOLD ROUTE CHECKED: confirmed -> refunded, sold units back to available. A pool deleted
-- since the hold was made (even if created again: a new generation) cannot take them back. For
-- a cross-partition hold the parts check that (part_refundable) before home decides: CHECKED is
-- 1 once they did, and until then the answer is {"precheck"}.
C.refund = function(a)
    local hold, other = S.find_hold(a[1], a[2])
    if not hold then return other end
    if hold.status == 'refunded' then return S.hold_reply(hold, false) end
    if hold.status ~= 'confirmed' then
        return S.error('hold_not_confirmed', { { 'hold_id', hold.id, 's' } })
    end
    if hold.cross then
        if a[3] ~= '1' then
            return { kind = 'raw', json = '{"precheck":' .. S.hold_json(hold) .. '}', stop = true }
        end
        S.queue_apply(hold, 'refund', false)
    else
        local pools = {}
        for i, item in ipairs(hold.items) do
            local pool = S.pool_get(item.pool)
            if not pool or pool.generation ~= item.generation then
                return S.error('pool_deleted', { { 'pool', item.pool, 's' } })
            end
            pools[i] = pool
        end
        for i, item in ipairs(hold.items) do
            local pool = pools[i]
            pool.sold = pool.sold - item.qty
            pool.available = pool.available + item.qty
            S.pool_put_counts(pool)
            S.usage_give_back(item.pool, hold.user, item.qty)
            S.note_freed_pool(item.pool)
        end
    end
    S.hold_finish(hold, 'refunded', S.now)
    S.hold_event('refunded', hold)
    return S.hold_reply(hold, false)
end

-- extend HOLD ROUTE TTL_MS
C.extend = function(a)
    local hold, other = S.find_hold(a[1], a[2])
    if not hold then return other end
    if hold.status ~= 'held' then
        return S.error('hold_' .. hold.status, { { 'hold_id', hold.id, 's' } })
    end
    hold.expires_at_ms = S.now + tonumber(a[3])
    redis.call('HSET', S.key('hold', hold.id), 'e', S.int(hold.expires_at_ms))
    redis.call('ZADD', S.key('expiry'), S.int(hold.expires_at_ms), hold.id)
    S.emit('extended', { { 'hold_id', hold.id, 's' }, { 'expires_at_ms', hold.expires_at_ms, 'n' } })
    return S.hold_reply(hold, false)
end

-- get_hold HOLD ROUTE
C.get_hold = function(a)
    local hold, other = S.find_hold(a[1], a[2])
    if not hold then return other end
    return S.hold_reply(hold, false)
end
