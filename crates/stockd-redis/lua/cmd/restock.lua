-- cmd/restock.lua: adds units to a pool, or takes available units away.
-- Mirrors stockd-core src/state/cmd/restock.rs.

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
    return S.pool_reply(pool, false)
end
