-- cmd/refund.lua: gives a confirmed hold's sold units back.
-- Mirrors stockd-core src/state/cmd/refund.rs.

-- refund HOLD ROUTE CHECKED: confirmed -> refunded, sold units back to available. A pool deleted
-- since the hold was made (even if created again: a new generation) cannot take them back. For
-- a cross-partition hold the parts check that (part_refundable) before home decides: CHECKED is
-- 1 once they did, and until then the answer is {"precheck"}.
C.refund = function(a)
    local hold, other = S.find_hold(a[1], a[2])
    if not hold then return other end
    if hold.status == 'refunded' then return S.hold_reply(hold, false) end
    if hold.status ~= 'confirmed' then
        return S.error('hold_not_confirmed', { { 'hold_id', hold.id, 's' } })
    end
    if hold.cross then
        if a[3] ~= '1' then
            return { kind = 'raw', json = '{"precheck":' .. S.hold_json(hold) .. '}', stop = true }
        end
        S.queue_apply(hold, 'refund', false)
    else
        local deleted = S.first_deleted_pool(hold.items)
        if deleted then return S.error('pool_deleted', { { 'pool', deleted, 's' } }) end
        S.move_units(hold.items, 'sold', 'available', hold.user)
    end
    S.hold_finish(hold, 'refunded', S.now)
    S.hold_event('refunded', hold)
    return S.hold_reply(hold, false)
end
