-- cmd/lock_renew.lua: moves the deadline of a lease its owner still holds, and owns_lock, the
-- ownership check renew and release share.
-- Mirrors stockd-core src/state/cmd/lock_renew.rs.

-- Whether OWNER with TOKEN holds the unexpired lease on NAME.
function S.owns_lock(name, owner, token)
    local v = redis.call('HMGET', S.key('lock', name), 'o', 't', 'e')
    return v[1] == owner and v[2] == token and S.now < tonumber(v[3])
end

-- lock_renew NAME OWNER TOKEN TTL_MS
C.lock_renew = function(a)
    local name, owner, token = a[1], a[2], a[3]
    if not S.owns_lock(name, owner, token) then return S.error('not_lock_owner') end
    local expires_at_ms = S.now + tonumber(a[4])
    redis.call('HSET', S.key('lock', name), 'e', S.int(expires_at_ms))
    redis.call('ZADD', S.key('lockexp'), S.int(expires_at_ms), name)
    return { kind = 'lock', token = tonumber(token), expires_at_ms = expires_at_ms }
end
