-- cmd/release.lua: gives a held hold's units back before it expires.
-- Mirrors stockd-core src/state/cmd/release.rs.

-- release HOLD ROUTE
C.release = function(a)
    local hold, other = S.find_hold(a[1], a[2])
    if not hold then return other end
    if hold.status == 'held' then
        S.apply_returned(hold, 'released')
        return S.hold_reply(hold, false)
    elseif hold.status == 'released' or hold.status == 'expired' then
        -- Released, or expired: the stock is back either way.
        return S.hold_reply(hold, false)
    end
    return S.error('hold_' .. hold.status, { { 'hold_id', hold.id, 's' } })
end
