-- cmd/reads.lua: get_pool, list_pools (this partition's page; the server merges partitions), get_hold.
-- Mirrors stockd-core src/state/cmd/reads.rs.

-- get_pool POOL
C.get_pool = function(a)
    local pool = S.pool_get(a[1])
    if not pool then
        return S.error('pool_not_found', { { 'pool', a[1], 's' } })
    end
    return S.pool_reply(pool, false)
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

-- get_hold HOLD ROUTE
C.get_hold = function(a)
    local hold, other = S.find_hold(a[1], a[2])
    if not hold then return other end
    return S.hold_reply(hold, false)
end
