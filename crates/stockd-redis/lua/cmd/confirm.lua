-- cmd/confirm.lua: turns a held hold into a sale.
-- Mirrors stockd-core src/state/cmd/confirm.rs.

-- confirm HOLD ROUTE
C.confirm = function(a)
    local hold, other = S.find_hold(a[1], a[2])
    if not hold then return other end
    if hold.status == 'held' then
        S.apply_confirmed(hold)
        return S.hold_reply(hold, false)
    elseif hold.status == 'confirmed' then
        return S.hold_reply(hold, false)
    end
    return S.error('hold_' .. hold.status, { { 'hold_id', hold.id, 's' } })
end
