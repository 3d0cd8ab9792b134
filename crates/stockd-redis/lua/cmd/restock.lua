-- cmd/restock.lua: adds units to a pool, or takes available units away.
-- Mirrors stockd-core src/state/cmd/restock.rs.

-- A restock's request id is remembered in its pool's partition, in the key `rid:ID` (value
-- 'AT_MS DELTA POOL'), written in the same call as the restock. It is forgotten at AT_MS + the
-- hold retention by the call's clock, as the core forgets it; the key's expiry frees the memory
-- an hour later (S.FORGOTTEN_KEY_MARGIN_MS, as for holds).
function S.restock_request_get(request_id)
    local text = redis.call('GET', S.key('rid', request_id))
    if not text then return nil end
    local at_ms, delta, pool = string.match(text, '^(%d+) (%-?%d+) (.+)$')
    at_ms = tonumber(at_ms)
    if at_ms + S.hold_retention_ms <= S.now then return nil end
    return { at_ms = at_ms, delta = tonumber(delta), pool = pool }
end

-- Remembers a restock's request id (the call that restocks writes it; a refused restock none).
function S.remember_restock(request_id, delta, pool_id)
    redis.call('SET', S.key('rid', request_id), S.now_text .. ' ' .. S.int(delta) .. ' ' .. pool_id,
        'PX', S.int(S.hold_retention_ms + S.FORGOTTEN_KEY_MARGIN_MS))
end

function S.request_id_conflict(request_id, first)
    return S.error('request_id_conflict', { { 'request_id', request_id, 's' },
        { 'pool', first.pool, 's' }, { 'delta', first.delta, 'n' } })
end

-- restock POOL DELTA REQUEST_ID ('-' for none)
C.restock = function(a)
    local id, delta = a[1], tonumber(a[2])
    local request_id = a[3]
    if request_id == '-' then request_id = nil end
    local guard = S.whole_pool_guard(id)
    if guard then return guard end
    if request_id then
        local first = S.restock_request_get(request_id)
        if first then
            -- A retry changes nothing and says it is one (replayed); the id with another pool
            -- or delta is a conflict.
            if first.pool ~= id or first.delta ~= delta then
                return S.request_id_conflict(request_id, first)
            end
            local pool = S.pool_get(id)
            if not pool then
                return S.error('pool_not_found', { { 'pool', id, 's' } })
            end
            return S.pool_reply(pool, false, true)
        end
    end
    local pool = S.pool_get(id)
    if not pool then
        return S.error('pool_not_found', { { 'pool', id, 's' } })
    end
    if delta < 0 and -delta > pool.available then
        return S.error('insufficient_stock', { { 'pool', id, 's' },
            { 'available', pool.available, 'n' }, { 'requested', -delta, 'n' } })
    end
    if delta > 0 and pool.total + delta > S.TOTAL_MAX then
        return S.error('invalid_request', { { 'message', 'restock would take total of pool '
            .. id .. ' above ' .. S.int(S.TOTAL_MAX), 's' } })
    end
    local before = pool.available
    pool.total = pool.total + delta
    pool.available = pool.available + delta
    S.pool_put_counts(pool)
    local fields = { { 'pool', id, 's' }, { 'available', pool.available, 'n' },
        { 'total', pool.total, 'n' }, { 'delta', delta, 'n' } }
    if request_id then
        -- Only a restock that succeeded is remembered: a refused one leaves the id new.
        S.remember_restock(request_id, delta, id)
        fields[#fields + 1] = { 'request_id', request_id, 's' }
    end
    S.emit('restocked', fields)
    if S.low_stock_crossed(pool, before) then S.emit_low_stock(pool) end
    if pool.available > before then S.note_freed_pool(id) end
    return S.pool_reply(pool, false, false)
end

-- On a dataset of several partitions a request id is first claimed where the id hashes, in the
-- key `ridc:ID` (value 'AT_MS DELTA PENDING POOL'), before its restock runs in its pool's
-- partition: two first uses of one id on pools of different partitions meet there, and the second
-- is a conflict. PENDING counts the claims not known to be refused: a refused restock takes its
-- claim back (rid_unclaim), and the key goes when none is left, so a refused restock leaves the id
-- new as the core has it. A restock that succeeded, or whose answer was lost, keeps its claim until
-- the id is forgotten (AT_MS + the hold retention, AT_MS of the first claim), which is no later
-- than its pool's partition forgets it.
local function rid_claim_get(request_id)
    local text = redis.call('GET', S.key('ridc', request_id))
    if not text then return nil end
    local at_ms, delta, pending, pool = string.match(text, '^(%d+) (%-?%d+) (%d+) (.+)$')
    at_ms = tonumber(at_ms)
    if at_ms + S.hold_retention_ms <= S.now then return nil end
    return { at_ms = at_ms, delta = tonumber(delta), pending = tonumber(pending), pool = pool }
end

local function rid_claim_put(request_id, claim)
    local key = S.key('ridc', request_id)
    if claim.pending == 0 then
        redis.call('DEL', key)
        return
    end
    redis.call('SET', key, S.int(claim.at_ms) .. ' ' .. S.int(claim.delta) .. ' '
        .. S.int(claim.pending) .. ' ' .. claim.pool,
        'PX', S.int(claim.at_ms + S.hold_retention_ms + S.FORGOTTEN_KEY_MARGIN_MS - S.now))
end

-- rid_claim REQUEST_ID POOL DELTA: {"unseen":true} (the restock may run in its pool's partition),
-- or the conflict with the id's claim for another pool or delta.
C.rid_claim = function(a)
    local request_id, pool, delta = a[1], a[2], tonumber(a[3])
    local claim = rid_claim_get(request_id)
    if claim and (claim.pool ~= pool or claim.delta ~= delta) then
        return S.request_id_conflict(request_id, claim)
    end
    claim = claim or { at_ms = S.now, delta = delta, pending = 0, pool = pool }
    claim.pending = claim.pending + 1
    rid_claim_put(request_id, claim)
    return { kind = 'raw', json = '{"unseen":true}' }
end

-- rid_unclaim REQUEST_ID POOL DELTA: the restock of a claim was refused; takes the claim back.
C.rid_unclaim = function(a)
    local request_id, pool, delta = a[1], a[2], tonumber(a[3])
    local claim = rid_claim_get(request_id)
    if claim and claim.pool == pool and claim.delta == delta and claim.pending > 0 then
        claim.pending = claim.pending - 1
        rid_claim_put(request_id, claim)
    end
    return { kind = 'raw', json = '{"unseen":true}' }
end
