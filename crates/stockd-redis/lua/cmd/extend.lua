-- cmd/extend.lua: sets a new deadline on a held hold.
-- Mirrors stockd-core src/state/cmd/extend.rs.

-- extend HOLD ROUTE TTL_MS
C.extend = function(a)
    local hold, other = S.find_hold(a[1], a[2])
    if not hold then return other end
    if hold.status ~= 'held' then
        return S.error('hold_' .. hold.status, { { 'hold_id', hold.id, 's' } })
    end
    hold.expires_at_ms = S.now + tonumber(a[3])
    redis.call('HSET', S.key('hold', hold.id), 'e', S.int(hold.expires_at_ms))
    S.zadd(S.key('expiry'), S.int(hold.expires_at_ms), hold.id)
    S.emit('extended', { { 'hold_id', hold.id, 's' }, { 'expires_at_ms', hold.expires_at_ms, 'n' } })
    return S.hold_reply(hold, false)
end
