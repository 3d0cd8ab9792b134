-- cmd/reads.lua: get_pool, get_segments, list_pools and list_holds (this partition's page; the server merges
-- partitions), get_hold.
-- Mirrors stockd-core src/state/cmd/reads.rs.

-- get_pool POOL
C.get_pool = function(a)
    local guard = S.spread_guard(a[1])
    if guard then return guard end
    local pool = S.pool_get(a[1])
    if not pool then
        return S.error('pool_not_found', { { 'pool', a[1], 's' } })
    end
    return S.pool_reply(pool, false, false)
end

-- get_segments POOL: the pool's one segment (a partition keeps a pool whole).
C.get_segments = function(a)
    local guard = S.spread_guard(a[1])
    if guard then return guard end
    local pool = S.pool_get(a[1])
    if not pool then
        return S.error('pool_not_found', { { 'pool', a[1], 's' } })
    end
    local segment = S.json_object({ { 'segment', 0, 'n' }, { 'partition', S.partition, 'n' },
        { 'total', pool.total, 'n' }, { 'available', pool.available, 'n' },
        { 'held', pool.held, 'n' }, { 'sold', pool.sold, 'n' } })
    return { kind = 'raw', json = '{"segments":[' .. segment .. ']}' }
end

-- list_pools PREFIX AFTER LIMIT: up to LIMIT pools of this partition with id >= PREFIX (> AFTER
-- when AFTER >= PREFIX), in id order, and whether more follow. The caller merges partitions.
C.list_pools = function(a)
    local prefix, after, limit = a[1], a[2], tonumber(a[3])
    local lower = '[' .. prefix
    if after ~= '' and after >= prefix then lower = '(' .. after end
    local ids = redis.call('ZRANGEBYLEX', S.key('pools'), lower, '+', 'LIMIT', '0', S.int(limit + 1))
    local list, more, spread = {}, false, {}
    for _, id in ipairs(ids) do
        if string.sub(id, 1, #prefix) ~= prefix then break end
        if #list == limit then
            more = true
            break
        end
        local pool = S.pool_get(id)
        list[#list + 1] = S.pool_json(pool)
        -- Its counts here are segment 0's: the server collects the whole pool's.
        if pool.spread then spread[#spread + 1] = S.json_string(id) end
    end
    return { kind = 'pools', list = list, more = more, spread = spread }
end

-- get_hold HOLD ROUTE
C.get_hold = function(a)
    local hold, other = S.find_hold(a[1], a[2])
    if not hold then return other end
    return S.hold_reply(hold, false)
end

-- The hold as get_hold would show it now, if it matches the filters ('' for none): an overdue
-- hold is expired (finished at its deadline), a record not yet a hold is not listed.
local function listed_hold(hold, pool, user, status)
    if not S.visible(hold) then return nil end
    if user ~= '' and hold.user ~= user then return nil end
    if pool ~= '' then
        local found = false
        for _, item in ipairs(hold.items) do
            if S.segment_of(item.pool) == pool then
                found = true
                break
            end
        end
        if not found then return nil end
    end
    if hold.status == 'held' and S.now >= hold.expires_at_ms then
        hold.status = 'expired'
        hold.finished_at_ms = hold.expires_at_ms
    end
    if status ~= '' and hold.status ~= status then return nil end
    return hold
end

-- list_holds POOL USER STATUS AFTER LIMIT: up to LIMIT holds of this partition after AFTER
-- matching the filters ('' for none), in id order, and `next`: where to go on from, or none at
-- the end. Walks the user's index when given, else the pool's, else all holds, and examines at
-- most S.HOLD_LIST_EXAMINED_MAX entries, as the core does. Writes nothing but the forgetting
-- any read of a hold past retention does. The caller merges partitions.
C.list_holds = function(a)
    local pool, user, status, after, limit = a[1], a[2], a[3], a[4], tonumber(a[5])
    local key = S.key('holds')
    if user ~= '' then
        key = S.key('uholds', user)
    elseif pool ~= '' then
        key = S.key('pholds', pool)
    end
    local lower = '-'
    if after ~= '' then lower = '(' .. after end
    S.zflush()
    local ids = redis.call('ZRANGEBYLEX', key, lower, '+', 'LIMIT', '0',
        S.int(S.HOLD_LIST_EXAMINED_MAX + 1))
    local list, next, last_listed, last_examined = {}, nil, nil, nil
    for examined, id in ipairs(ids) do
        if examined > S.HOLD_LIST_EXAMINED_MAX then
            next = last_examined
            break
        end
        local hold = S.hold_get(id)
        -- A record gone by its key's expiry (no sweep ran for an hour past its retention) leaves
        -- a stale entry: dropped here.
        if not hold then S.zrem(key, id) end
        if hold and listed_hold(hold, pool, user, status) then
            if #list == limit then
                next = last_listed
                break
            end
            list[#list + 1] = S.hold_json(hold)
            last_listed = id
        end
        last_examined = id
    end
    return { kind = 'holds', list = list, next = next }
end
