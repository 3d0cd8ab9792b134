-- cmd/lock_acquire.lua: takes a lease with a fresh fencing token, or parks the request. The
-- fencing counter is the partition's (`meta` field `fence`); a lock name always lives in the
-- same partition, so its tokens strictly increase across acquisitions, restarts included.
-- Mirrors stockd-core src/state/cmd/lock_acquire.rs.

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
