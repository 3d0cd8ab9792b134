-- cmd/lock_release.lua: frees a lease its owner still holds, so the next waiter can take it.
-- Mirrors stockd-core src/state/cmd/lock_release.rs.

-- lock_release NAME OWNER TOKEN
C.lock_release = function(a)
    local name, owner, token = a[1], a[2], a[3]
    if not S.owns_lock(name, owner, token) then return S.error('not_lock_owner') end
    redis.call('DEL', S.key('lock', name))
    redis.call('ZREM', S.key('lockexp'), name)
    S.freed_locks[#S.freed_locks + 1] = name
    return { kind = 'lock_released' }
end
