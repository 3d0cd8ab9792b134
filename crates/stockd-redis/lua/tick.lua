-- tick.lua: what time alone does, run by every stockd server on every partition ten times a
-- second: expire held holds past their deadline and free lapsed leases, then serve the waiters
-- they free. Mirrors stockd-core src/state/tick.rs. Each hold expires exactly once, whoever
-- sweeps: the call is atomic and re-checks the hold's status and deadline.

-- sweep [RECHECK]: answers how many holds it expired (at most S.EXPIRIES_PER_SWEEP_MAX, so one
-- call stays short when a crowd of holds lapses at once; the next sweep continues at once).
-- RECHECK 1 (a server's first sweep, and its first after adopting an accepted dataset) makes every
-- held part of the partition due for its ownership check at once (cross.lua).
C.sweep = function(a)
    if a[1] == '1' then S.parts_due_now() end
    local expired = 0
    S.zflush()
    local due = redis.call('ZRANGEBYSCORE', S.key('expiry'), '-inf', S.int(S.now),
        'LIMIT', '0', S.int(S.EXPIRIES_PER_SWEEP_MAX))
    for _, id in ipairs(due) do
        local hold = S.hold_get(id)
        if hold and hold.status == 'held' and S.now >= hold.expires_at_ms then
            S.apply_returned(hold, 'expired')
            expired = expired + 1
        else
            -- Stale: the hold finished, was extended (it has a later entry) or was forgotten.
            if not hold or hold.status ~= 'held' then S.zrem(S.key('expiry'), id) end
        end
    end
    -- Finished holds past retention: forgotten (record and index entries) by S.hold_get. An id
    -- reused since then names a newer hold, which stays.
    S.zflush()
    local forget = redis.call('ZRANGEBYSCORE', S.key('forget'), '-inf', S.int(S.now),
        'LIMIT', '0', S.int(S.FORGETS_PER_SWEEP_MAX))
    for _, id in ipairs(forget) do
        S.hold_get(id)
        S.zrem(S.key('forget'), id)
    end
    local lapsed = redis.call('ZRANGEBYSCORE', S.key('lockexp'), '-inf', S.int(S.now))
    for _, name in ipairs(lapsed) do
        local key = S.key('lock', name)
        local expires = S.num(redis.call('HGET', key, 'e'))
        if not expires or expires <= S.now then
            redis.call('DEL', key)
            S.freed_locks[#S.freed_locks + 1] = name
        end
        redis.call('ZREM', S.key('lockexp'), name)
    end
    -- Cross-partition holds whose parts a server left behind (cross.lua): for the sweeper to
    -- roll forward (decided, not yet applied) or back (a reserve that never finished), and held
    -- parts whose home is to be asked whether it still owns them.
    local forward, back, parts = S.cross_due()
    local pops, frozen, low = S.segments_due()
    local function ids(list)
        local texts = {}
        for i, id in ipairs(list) do texts[i] = S.json_string(id) end
        return '[' .. table.concat(texts, ',') .. ']'
    end
    return { kind = 'raw', json = '{"expired":' .. S.int(expired) .. ',"more":'
        .. ((#due == S.EXPIRIES_PER_SWEEP_MAX or #forget == S.FORGETS_PER_SWEEP_MAX)
            and 'true' or 'false') .. ',"forward":' .. ids(forward)
        .. ',"back":' .. ids(back) .. ',"parts":' .. ids(parts) .. ',"pops":' .. ids(pops)
        .. ',"frozen":' .. ids(frozen) .. ',"low":' .. ids(low) .. '}' }
end
