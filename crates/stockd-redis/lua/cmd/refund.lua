-- cmd/refund.lua: gives a confirmed hold's sold units back to available, or, without restock,
-- takes them out of the pool (sold and total both shrink).
-- Mirrors stockd-core src/state/cmd/refund.rs.

-- refund HOLD ROUTE CHECKED RESTOCK: confirmed -> refunded, sold units back to available
-- (RESTOCK 1) or out of their pools (RESTOCK 0). A repeat answers the hold whatever its
-- RESTOCK: the first refund decided where the units went. A pool deleted
-- since the hold was made (even if created again: a new generation) cannot take them back. For
-- a cross-partition hold the parts check that (part_refundable) before home decides: CHECKED is
-- 1 once they did, and until then the answer is {"precheck"}.
C.refund = function(a)
    local hold, other = S.find_hold(a[1], a[2])
    if not hold then return other end
    local restock = a[4] ~= '0'
    if hold.status == 'refunded' then return S.hold_reply(hold, false) end
    if hold.status ~= 'confirmed' then
        return S.error('hold_not_confirmed', { { 'hold_id', hold.id, 's' } })
    end
    if hold.cross then
        if a[3] ~= '1' then
            return { kind = 'raw', json = '{"precheck":' .. S.hold_json(hold) .. '}', stop = true }
        end
        -- The parts follow: 'refund' puts their units back, 'writeoff' takes them out.
        S.queue_apply(hold, restock and 'refund' or 'writeoff', false)
    else
        local deleted = S.first_deleted_pool(hold.items)
        if deleted then return S.error('pool_deleted', { { 'pool', deleted, 's' } }) end
        if restock then
            S.move_units(hold.items, 'sold', 'available', hold.user)
        else
            S.write_off_units(hold.items, hold.user)
        end
    end
    S.hold_finish(hold, 'refunded', S.now)
    S.hold_event('refunded', hold, restock and ',"restock":true' or ',"restock":false')
    return S.hold_reply(hold, false)
end
