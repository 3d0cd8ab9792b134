-- cmd/delete_pool.lua: removes a pool, never while units of it are held.
-- Mirrors stockd-core src/state/cmd/delete_pool.rs.

-- delete_pool POOL
C.delete_pool = function(a)
    local id = a[1]
    local guard = S.whole_pool_guard(id)
    if guard then return guard end
    local pool = S.pool_get(id)
    if not pool then
        return S.error('pool_not_found', { { 'pool', id, 's' } })
    end
    if pool.held > 0 then
        return S.error('pool_has_active_holds', { { 'pool', id, 's' }, { 'held', pool.held, 'n' } })
    end
    redis.call('DEL', S.key('pool', id), S.key('usage', id))
    S.pool_forget(id)
    redis.call('ZREM', S.key('pools'), id)
    -- Its last numbers, so that a consumer summing deltas can take them out.
    S.emit('pool_deleted', { { 'pool', id, 's' }, { 'available', pool.available, 'n' },
        { 'total', pool.total, 'n' } })
    -- Waiters on it get their answer (pool_not_found) now rather than at their deadline.
    S.note_freed_pool(id)
    return { kind = 'deleted' }
end
