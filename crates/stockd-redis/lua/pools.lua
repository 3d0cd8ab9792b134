-- pools.lua: put_pool, restock, get_pool, list_pools, delete_pool.
-- Mirrors stockd-core: State::put_pool, restock, delete_pool, list_pools and apply_record's
-- PoolUpserted / Restocked / PoolDeleted.

local function pool_reply(pool, created)
    return { kind = 'pool', json = S.pool_json(pool), created = created }
end

-- put_pool POOL TOTAL LIMIT STARTS ENDS THRESHOLD IF_ABSENT ('-' for an unset rule)
C.put_pool = function(a)
    local id, total = a[1], tonumber(a[2])
    local pool = S.pool_get(id)
    local created = pool == nil
    if pool and a[7] == '1' then
        return pool_reply(pool, false)
    end
    if pool and total < pool.held + pool.sold then
        return S.error('total_below_committed', { { 'pool', id, 's' }, { 'total', total, 'n' },
            { 'committed', pool.held + pool.sold, 'n' } })
    end
    if created then
        local generation = redis.call('HINCRBY', S.meta, 'generation', 1)
        pool = { id = id, generation = generation, total = 0, available = 0, held = 0, sold = 0 }
        redis.call('HSET', S.key('pool', id), 'g', S.int(generation))
        redis.call('ZADD', S.key('pools'), '0', id)
    end
    local before = pool.available
    pool.total = total
    pool.available = total - pool.held - pool.sold
    pool.per_user_limit = S.num(a[3] ~= '-' and a[3])
    pool.starts_at_ms = S.num(a[4] ~= '-' and a[4])
    pool.ends_at_ms = S.num(a[5] ~= '-' and a[5])
    pool.low_stock_threshold = S.num(a[6] ~= '-' and a[6])
    S.pool_put_counts(pool)
    local key = S.key('pool', id)
    for _, rule in ipairs({ { 'l', a[3] }, { 'sa', a[4] }, { 'ea', a[5] }, { 'th', a[6] } }) do
        if rule[2] == '-' then
            redis.call('HDEL', key, rule[1])
        else
            redis.call('HSET', key, rule[1], rule[2])
        end
    end
    S.emit('pool_upserted', { { 'pool', id, 's' }, { 'available', pool.available, 'n' },
        { 'total', pool.total, 'n' } })
    -- Created or updated at or below the threshold fires, whatever it was before.
    if pool.low_stock_threshold ~= nil and pool.available <= pool.low_stock_threshold then
        S.emit_low_stock(pool)
    end
    if pool.available > before then S.note_freed_pool(id) end
    return pool_reply(pool, created)
end

-- restock POOL DELTA
C.restock = function(a)
    local id, delta = a[1], tonumber(a[2])
    local pool = S.pool_get(id)
    if not pool then
        return S.error('pool_not_found', { { 'pool', id, 's' } })
    end
    if delta < 0 and -delta > pool.available then
        return S.error('insufficient_stock', { { 'pool', id, 's' },
            { 'available', pool.available, 'n' }, { 'requested', -delta, 'n' } })
    end
    if delta > 0 and pool.total + delta > S.TOTAL_MAX then
        return S.error('invalid_request', { { 'message', 'restock would take total of pool '
            .. id .. ' above ' .. S.int(S.TOTAL_MAX), 's' } })
    end
    local before = pool.available
    pool.total = pool.total + delta
    pool.available = pool.available + delta
    S.pool_put_counts(pool)
    S.emit('restocked', { { 'pool', id, 's' }, { 'available', pool.available, 'n' },
        { 'total', pool.total, 'n' }, { 'delta', delta, 'n' } })
    if S.low_stock_crossed(pool, before) then S.emit_low_stock(pool) end
    if pool.available > before then S.note_freed_pool(id) end
    return pool_reply(pool, false)
end

-- get_pool POOL
C.get_pool = function(a)
    local pool = S.pool_get(a[1])
    if not pool then
        return S.error('pool_not_found', { { 'pool', a[1], 's' } })
    end
    return pool_reply(pool, false)
end

-- list_pools PREFIX AFTER LIMIT: up to LIMIT pools of this partition with id >= PREFIX (> AFTER
-- when AFTER >= PREFIX), in id order, and whether more follow. The caller merges partitions.
C.list_pools = function(a)
    local prefix, after, limit = a[1], a[2], tonumber(a[3])
    local lower = '[' .. prefix
    if after ~= '' and after >= prefix then lower = '(' .. after end
    local ids = redis.call('ZRANGEBYLEX', S.key('pools'), lower, '+', 'LIMIT', '0', S.int(limit + 1))
    local list, more = {}, false
    for _, id in ipairs(ids) do
        if string.sub(id, 1, #prefix) ~= prefix then break end
        if #list == limit then
            more = true
            break
        end
        list[#list + 1] = S.pool_json(S.pool_get(id))
    end
    return { kind = 'pools', list = list, more = more }
end

-- delete_pool POOL
C.delete_pool = function(a)
    local id = a[1]
    local pool = S.pool_get(id)
    if not pool then
        return S.error('pool_not_found', { { 'pool', id, 's' } })
    end
    if pool.held > 0 then
        return S.error('pool_has_active_holds', { { 'pool', id, 's' }, { 'held', pool.held, 'n' } })
    end
    redis.call('DEL', S.key('pool', id), S.key('usage', id))
    redis.call('ZREM', S.key('pools'), id)
    S.emit('pool_deleted', { { 'pool', id, 's' } })
    -- Waiters on it get their answer (pool_not_found) now rather than at their deadline.
    S.note_freed_pool(id)
    return { kind = 'deleted' }
end
