-- cmd/put_pool.lua: creates a pool, or replaces its settings and total (if_absent: a plain read
-- when it exists).
-- Mirrors stockd-core src/state/cmd/put_pool.rs.

-- put_pool POOL TOTAL LIMIT STARTS ENDS THRESHOLD IF_ABSENT SEGMENTS ('-' for an unset rule or
-- no segment count). The segment count is fixed when the pool is created; this partition keeps
-- the pool whole, whatever the count.
C.put_pool = function(a)
    local id, total = a[1], tonumber(a[2])
    local segments = S.num(a[8] ~= '-' and a[8])
    local guard = S.whole_pool_guard(id)
    if guard then return guard end
    local pool = S.pool_get(id)
    local created = pool == nil
    if pool and a[7] == '1' then
        return S.pool_reply(pool, false, false)
    end
    if pool and segments ~= nil and segments ~= pool.segments then
        return S.error('segments_fixed', { { 'pool', id, 's' }, { 'segments', pool.segments, 'n' },
            { 'requested', segments, 'n' } })
    end
    if pool and total < pool.held + pool.sold then
        return S.error('total_below_committed', { { 'pool', id, 's' }, { 'total', total, 'n' },
            { 'committed', pool.held + pool.sold, 'n' } })
    end
    if created then
        local generation = redis.call('HINCRBY', S.meta, 'generation', 1)
        pool = { id = id, generation = generation, total = 0, available = 0, held = 0, sold = 0,
            segments = segments or 1 }
        redis.call('HSET', S.key('pool', id), 'g', S.int(generation))
        if pool.segments > 1 then redis.call('HSET', S.key('pool', id), 'sg', S.int(pool.segments)) end
        redis.call('ZADD', S.key('pools'), '0', id)
    end
    local before = pool.available
    -- On a create the old total is the 0 set above, so the delta is the total.
    local delta = total - pool.total
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
        { 'total', pool.total, 'n' }, { 'delta', delta, 'n' } })
    -- Created or updated at or below the threshold fires, whatever it was before.
    if pool.low_stock_threshold ~= nil and pool.available <= pool.low_stock_threshold then
        S.emit_low_stock(pool)
    end
    if pool.available > before then S.note_freed_pool(id) end
    return S.pool_reply(pool, created, false)
end
