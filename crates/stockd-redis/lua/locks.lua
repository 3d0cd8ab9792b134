-- locks.lua: lease locks with fencing tokens: lock_acquire, lock_renew, lock_release.
-- Mirrors stockd-core: State::lock_acquire, try_lock_acquire, owns_lock, lock_renew,
-- lock_release and apply_record's LockAcquired / LockRenewed / LockReleased. Locks give no events.
--
-- The fencing counter is the partition's (`meta` field `fence`); a lock name always lives in the
-- same partition, so its tokens strictly increase across acquisitions, restarts included.

-- Words: NAME OWNER TTL_MS WAIT_MS
function S.try_lock_acquire(a)
    local name, owner, ttl_ms = a[1], a[2], tonumber(a[3])
    local key = S.key('lock', name)
    local expires = S.num(redis.call('HGET', key, 'e'))
    if expires and S.now < expires then
        return S.error('lock_held', { { 'expires_at_ms', expires, 'n' } })
    end
    local token = redis.call('HINCRBY', S.meta, 'fence', 1)
    local expires_at_ms = S.now + ttl_ms
    redis.call('HSET', key, 'o', owner, 't', S.int(token), 'e', S.int(expires_at_ms))
    redis.call('ZADD', S.key('lockexp'), S.int(expires_at_ms), name)
    return { kind = 'lock', token = token, expires_at_ms = expires_at_ms }
end

-- lock_acquire NAME OWNER TTL_MS WAIT_MS
C.lock_acquire = function(a)
    local reply = S.try_lock_acquire(a)
    if tonumber(a[4]) == 0 or reply.code ~= 'lock_held' then return reply end
    local queue = S.key('lockq', a[1])
    if not S.waiter_room(queue) then return reply end
    local ticket = S.park('lock', a, S.now + tonumber(a[4]))
    redis.call('ZADD', queue, S.int(ticket), S.int(ticket))
    return { kind = 'wait', ticket = ticket }
end

-- Whether OWNER with TOKEN holds the unexpired lease on NAME.
local function owns_lock(name, owner, token)
    local v = redis.call('HMGET', S.key('lock', name), 'o', 't', 'e')
    return v[1] == owner and v[2] == token and S.now < tonumber(v[3])
end

-- lock_renew NAME OWNER TOKEN TTL_MS
C.lock_renew = function(a)
    local name, owner, token = a[1], a[2], a[3]
    if not owns_lock(name, owner, token) then return S.error('not_lock_owner') end
    local expires_at_ms = S.now + tonumber(a[4])
    redis.call('HSET', S.key('lock', name), 'e', S.int(expires_at_ms))
    redis.call('ZADD', S.key('lockexp'), S.int(expires_at_ms), name)
    return { kind = 'lock', token = tonumber(token), expires_at_ms = expires_at_ms }
end

-- lock_release NAME OWNER TOKEN
C.lock_release = function(a)
    local name, owner, token = a[1], a[2], a[3]
    if not owns_lock(name, owner, token) then return S.error('not_lock_owner') end
    redis.call('DEL', S.key('lock', name))
    redis.call('ZREM', S.key('lockexp'), name)
    S.freed_locks[#S.freed_locks + 1] = name
    return { kind = 'lock_released' }
end
