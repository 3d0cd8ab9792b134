-- state.lua: the call context and what every command reads: key names, numbers, JSON, pool and
-- hold records, finding and settling a hold, replies. Mirrors stockd-core src/state/mod.rs (the
-- state, views, settle); the transitions that change records are apply.lua's. The two tables
-- every file adds to, S (helpers and the per-call context) and C (commands by op name, each
-- returning a reply table, see S.reply_json), and every number the library is written with (the
-- limits it shares with stockd-core, S.TOTAL_MAX, S.WAITERS_PER_KEY_MAX,
-- S.HOLD_LIST_EXAMINED_MAX, S.SEQ_LIMIT, from stockd-core's limits.rs; and its own bounds and
-- timings, S.EXPIRIES_PER_SWEEP_MAX, S.PENDING_TIMEOUT_MS and the others) are defined before this
-- file by library.rs: each is declared once, there.
--
-- Every number written to Redis or into a reply goes through S.int (string.format '%d'):
-- Lua 5.1 prints doubles with 14 significant digits, which would round a 16-digit time.

function S.int(n)
    return string.format('%d', n)
end

function S.num(text)
    if text == false or text == nil then return nil end
    return tonumber(text)
end

-- ---------------------------------------------------------------- call context

-- KEYS[1] is the partition's meta key, `stockd:{tag}:meta`; every other key of the partition
-- shares its prefix and so its hash slot.
function S.begin(meta_key, argv)
    S.prefix = string.sub(meta_key, 1, -5)
    S.meta = meta_key
    S.partition = tonumber(argv[1])
    S.dataset = argv[2]
    S.seq_floor = tonumber(argv[3])
    if argv[4] ~= '' then
        S.now = tonumber(argv[4])
    else
        local t = redis.call('TIME')
        S.now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    S.hold_retention_ms = tonumber(argv[5])
    S.confirmed_retention_ms = tonumber(argv[6])
    S.event_retention_max = tonumber(argv[7])
    S.event_retention_max_text = argv[7]
    S.now_text = S.int(S.now)
    S.freed_pools = {}
    S.freed_locks = {}
    S.created_holds = {}
    S.woken = {}
    S.published = false
    -- A layout-2 partition's events of the call, written as one stream entry (S.finish).
    S.batch = {}
    -- Per call: pools read (id -> pool, or false when there is none) and whose counters changed,
    -- written once at the end of the call (S.finish), and the partition's event counter. A batch
    -- of holds on one hot pool then reads and writes that pool once, not once per hold.
    S.pools = {}
    S.dirty = {}
    S.dirty_order = {}
    S.seq = 0
    S.seq_dirty = false
    S.low_checks = nil
    -- Sorted-set entries added by the call, by key in the order first written, written as one
    -- ZADD per key (S.zflush): a batch of holds on one pool adds to its indexes once, not once
    -- per hold.
    S.zadds = {}
    S.zadd_order = {}
end

-- Queues `member` at `score` in the sorted set `key` (a later add of the same member in the call
-- wins, as within one ZADD). Nothing reads a queued entry before S.zflush wrote it: every read
-- or removal of the sorted sets written this way (the hold indexes, `expiry`, `forget`) goes
-- through S.zrem or calls S.zflush first.
function S.zadd(key, score, member)
    local pending = S.zadds[key]
    if not pending then
        pending = {}
        S.zadds[key] = pending
        S.zadd_order[#S.zadd_order + 1] = key
    end
    pending[#pending + 1] = score
    pending[#pending + 1] = member
end

function S.zflush()
    for _, key in ipairs(S.zadd_order) do
        redis.call('ZADD', key, unpack(S.zadds[key]))
    end
    S.zadds = {}
    S.zadd_order = {}
end

function S.zrem(key, member)
    if S.zadds[key] then S.zflush() end
    redis.call('ZREM', key, member)
end

-- Writes what the call kept in memory: the changed pools' counters, the event counter and the
-- queued sorted-set entries; and the change counter `rev` (S.rev, already counted) when BUMP_REV,
-- in the same write as the event counter.
function S.finish(bump_rev)
    S.zflush()
    S.flush_events()
    for _, id in ipairs(S.dirty_order) do
        local pool = S.dirty[id] and S.pools[id]
        if pool then
            pool.version = (pool.version or 0) + 1
            redis.call('HSET', S.key('pool', id), 't', S.int(pool.total), 'a', S.int(pool.available),
                'h', S.int(pool.held), 's', S.int(pool.sold), 'v', S.int(pool.version))
        end
    end
    S.dirty = {}
    S.dirty_order = {}
    local counters = {}
    if S.seq_dirty then
        table.insert(counters, 'seq')
        table.insert(counters, S.int(S.seq))
        S.seq_dirty = false
    end
    if bump_rev then
        table.insert(counters, 'rev')
        table.insert(counters, S.int(S.rev))
    end
    if #counters > 0 then redis.call('HSET', S.meta, unpack(counters)) end
end

-- The dataset this server knows must be the one in Redis, and no older than what it has seen:
-- a Redis back with less (restarted empty, an old backup, a lagging replica) is refused before
-- anything is read or written.
-- Refuses a call (before it reads or writes anything) on a dataset other than the server's, or
-- one that has less than the server saw: an event seq below SEQ_FLOOR, or a change counter below
-- REV_FLOOR (see `call` in main.lua; nil for a call that reads only).
function S.check_dataset(rev_floor)
    local meta = redis.call('HMGET', S.meta, 'dataset', 'seq', 'layout', 'rev', 'jfrom', 'jto')
    if meta[1] ~= S.dataset then
        return 'dataset_mismatch'
    end
    if meta[3] ~= '1' and meta[3] ~= '2' then
        return 'layout_unknown'
    end
    S.layout = meta[3]
    S.seq = tonumber(meta[2] or '0')
    S.seq_at_begin = S.seq
    S.rev = tonumber(meta[4] or '0')
    S.jump_from = tonumber(meta[5] or '0')
    S.jump_to = tonumber(meta[6] or '0')
    if S.seq < S.seq_floor or (rev_floor and S.rev < rev_floor) then
        return 'dataset_regressed'
    end
    return nil
end

-- Layout 2: the oldest seq the feed keeps once the newest is NEWEST, the newest
-- EVENT_RETENTION_MAX events. Seqs run on without gaps but at the last accept (main.lua), which
-- moved the seq from the stream's last id JUMP_FROM to JUMP_TO: a window reaching back past it
-- goes as many events further back as there were before the jump.
function S.feed_window_start(newest)
    local start = newest - S.event_retention_max + 1
    if start <= S.jump_to then start = start - (S.jump_to - S.jump_from) end
    return math.max(start, 1)
end

-- The channel of this dataset's wake-ups (waits.rs): pub/sub ignores the DB number, so each
-- dataset (its marker) has its own, and another dataset's seqs and tickets never reach it.
function S.wake_channel()
    return 'stockd:wake:' .. S.dataset
end

function S.key(kind, id)
    if id then
        return S.prefix .. kind .. ':' .. id
    end
    return S.prefix .. kind
end

-- ---------------------------------------------------------------- JSON (ids never need escaping)

-- Every string the library writes into JSON is an id (validated by the server: letters, digits
-- and . _ : -), an error message built from ids, or a literal of the library: none needs
-- escaping.
function S.json_string(text)
    return '"' .. text .. '"'
end

-- `fields` is a list of {name, value, kind} with kind 's' (string), 'n' (integer), 'b'
-- (boolean), 'j' (already JSON); a nil value is written as null.
function S.json_object(fields)
    local parts = {}
    for i, f in ipairs(fields) do
        local value = f[2]
        local text
        if value == nil then
            text = 'null'
        elseif f[3] == 's' then
            text = S.json_string(value)
        elseif f[3] == 'n' then
            text = S.int(value)
        elseif f[3] == 'b' then
            text = value and 'true' or 'false'
        else
            text = value
        end
        parts[i] = '"' .. f[1] .. '":' .. text
    end
    return '{' .. table.concat(parts, ',') .. '}'
end

-- ---------------------------------------------------------------- pools

-- Pool hash fields: g generation, t total, a available, h held, s sold, l per_user_limit,
-- sa starts_at_ms, ea ends_at_ms, th low_stock_threshold (rule fields absent when unset), sg
-- segments (absent for one; fixed when the pool is created), sp 1 when its segments are spread
-- over partitions (segments.lua; a segmented pool made by an earlier version is whole), fz the
-- pool op freezing it, v a version bumped with its counts (for a consistent collect), and for a
-- spread pool's low-stock watch (segments.lua) lo a floor or hi a ceiling of the segment's
-- available, lf (segment 0) 1 while the pool is at or below its threshold.
-- The pool object is the call's one copy: changes to it are seen by every later command of the
-- call, and S.pool_put_counts marks its counters to be written at the end.
function S.pool_get(id)
    local cached = S.pools[id]
    if cached ~= nil then return cached or nil end
    local v = redis.call('HMGET', S.key('pool', id), 'g', 't', 'a', 'h', 's', 'l', 'sa', 'ea', 'th',
        'sg', 'sp', 'fz', 'v', 'lo', 'hi', 'lf')
    if not v[1] then
        S.pools[id] = false
        return nil
    end
    local pool = {
        id = id, generation = tonumber(v[1]), total = tonumber(v[2]), available = tonumber(v[3]),
        held = tonumber(v[4]), sold = tonumber(v[5]), per_user_limit = S.num(v[6]),
        starts_at_ms = S.num(v[7]), ends_at_ms = S.num(v[8]), low_stock_threshold = S.num(v[9]),
        segments = tonumber(v[10] or '1'), spread = v[11] == '1', frozen_by = S.num(v[12]),
        version = tonumber(v[13] or '0'), floor = S.num(v[14]), ceiling = S.num(v[15]),
        low_fired = v[16] == '1',
    }
    S.pools[id] = pool
    return pool
end

function S.pool_put_counts(pool)
    S.pools[pool.id] = pool
    if pool.floor or pool.ceiling then S.low_watch(pool) end
    if not S.dirty[pool.id] then
        S.dirty[pool.id] = true
        S.dirty_order[#S.dirty_order + 1] = pool.id
    end
end

-- A deleted pool: nothing of it is written at the end of the call.
function S.pool_forget(id)
    S.pools[id] = false
    S.dirty[id] = nil
end

function S.pool_json(pool)
    return S.json_object({
        { 'pool', pool.id, 's' }, { 'total', pool.total, 'n' },
        { 'available', pool.available, 'n' }, { 'held', pool.held, 'n' },
        { 'sold', pool.sold, 'n' }, { 'per_user_limit', pool.per_user_limit, 'n' },
        { 'starts_at_ms', pool.starts_at_ms, 'n' }, { 'ends_at_ms', pool.ends_at_ms, 'n' },
        { 'low_stock_threshold', pool.low_stock_threshold, 'n' },
        { 'partition', S.partition, 'n' }, { 'segments', pool.segments, 'n' },
    })
end

-- replayed: a restock retried with the request id of one already applied (nothing changed).
function S.pool_reply(pool, created, replayed)
    return { kind = 'pool', json = S.pool_json(pool), created = created, replayed = replayed }
end

function S.usage_get(pool_id, user)
    return tonumber(redis.call('HGET', S.key('usage', pool_id), user) or '0')
end

function S.usage_add(pool_id, user, qty)
    if user then
        redis.call('HINCRBY', S.key('usage', pool_id), user, S.int(qty))
    end
end

function S.note_freed_pool(id)
    S.freed_pools[#S.freed_pools + 1] = id
end

-- ---------------------------------------------------------------- holds

-- Hold hash fields: st status, u user (absent when none), it items ("pool qty generation ..."),
-- cf confirm flag, c created_at_ms, e expires_at_ms, f finished_at_ms (absent while held), and
-- for a hold over several partitions (cross.lua) x = 1, at its attempt and ap, the part
-- transition to apply. Such a hold is also 'pending' or 'aborting' while its reserve runs: not a
-- hold yet for any command.
function S.hold_get(id)
    local v = redis.call('HMGET', S.key('hold', id), 'st', 'u', 'it', 'cf', 'c', 'e', 'f', 'x', 'at',
        'ap')
    if not v[1] then return nil end
    local items = {}
    local words = {}
    for w in string.gmatch(v[3], '%S+') do words[#words + 1] = w end
    for i = 1, #words, 3 do
        items[#items + 1] = { pool = words[i], qty = tonumber(words[i + 1]),
            generation = tonumber(words[i + 2]) }
    end
    local hold = {
        id = id, status = v[1], user = v[2] or nil, items = items, confirm = v[4] == '1',
        created_at_ms = tonumber(v[5]), expires_at_ms = tonumber(v[6]), finished_at_ms = S.num(v[7]),
        cross = v[8] == '1', attempt = v[9] or nil, ap = v[10] or nil,
    }
    -- Past retention, a finished hold is gone for every command, even before its key expires;
    -- but not while its parts still have a decision to apply (a part of a confirmed hold whose
    -- record were gone would look orphaned, and be returned).
    if hold.finished_at_ms and hold.finished_at_ms + S.retention_ms(hold.status) <= S.now
        and not hold.ap then
        S.hold_forget(hold)
        return nil
    end
    return hold
end

-- The hold indexes (list_holds): sorted sets of hold ids at score 0, read in id order with
-- ZRANGEBYLEX: `holds` (every hold record of this partition, a cross-partition hold on its home
-- only), `pholds:POOL` (those with an item in POOL) and `uholds:USER` (those of USER). A record
-- is indexed by the call that writes it first and leaves them in the call that deletes it.
-- Mirrors the core's HoldIndex (src/state/mod.rs).
function S.hold_index(id, user, items)
    S.zadd(S.key('holds'), '0', id)
    for _, item in ipairs(items) do
        S.zadd(S.key('pholds', (S.segment_of(item.pool))), '0', id)
    end
    if user then S.zadd(S.key('uholds', user), '0', id) end
end

function S.hold_unindex(id, user, items)
    S.zrem(S.key('holds'), id)
    for _, item in ipairs(items) do
        S.zrem(S.key('pholds', (S.segment_of(item.pool))), id)
    end
    if user then S.zrem(S.key('uholds', user), id) end
    S.zrem(S.key('forget'), id)
end

-- Deletes a hold record and its index entries.
function S.hold_forget(hold)
    redis.call('DEL', S.key('hold', hold.id))
    S.hold_unindex(hold.id, hold.user, hold.items)
end

-- Whether a hold record is a hold yet (a cross-partition reserve may still be under way).
function S.visible(hold)
    return hold ~= nil and hold.status ~= 'pending' and hold.status ~= 'aborting'
end

-- Items as the API shows them: each under its pool's id; an item in a segment J >= 1 of a
-- spread pool (`POOL~J` here) also says `"segment":J`, for the server to find its partition.
function S.items_json(items)
    local parts = {}
    for i, item in ipairs(items) do
        local pool, segment = S.segment_of(item.pool)
        local where = ''
        if segment ~= 0 then where = ',"segment":' .. S.int(segment) end
        parts[i] = '{"pool":' .. S.json_string(pool) .. ',"qty":' .. S.int(item.qty) .. where .. '}'
    end
    return '[' .. table.concat(parts, ',') .. ']'
end

-- The `"segments"` of a hold's events: for each item in a segment of a spread pool (segment 0
-- included), `{"pool","segment","qty"}`; '' when it has none.
function S.segments_json(items)
    local parts = {}
    for _, item in ipairs(items) do
        local pool, segment = S.segment_of(item.pool)
        local spread = segment ~= 0 or string.sub(item.pool, -2) == '~0'
        if not spread then
            local whole = S.pool_get(pool)
            spread = whole ~= nil and whole.spread
        end
        if spread then
            parts[#parts + 1] = '{"pool":' .. S.json_string(pool) .. ',"segment":' .. S.int(segment)
                .. ',"qty":' .. S.int(item.qty) .. '}'
        end
    end
    if #parts == 0 then return '' end
    return ',"segments":[' .. table.concat(parts, ',') .. ']'
end

-- A hold's items as JSON, made once per hold and call (its reply and events all carry them).
function S.hold_items_json(hold)
    if not hold.items_text then hold.items_text = S.items_json(hold.items) end
    return hold.items_text
end

function S.hold_json(hold)
    local user, finished = 'null', 'null'
    if hold.user then user = '"' .. hold.user .. '"' end
    if hold.finished_at_ms then finished = S.int(hold.finished_at_ms) end
    return '{"hold_id":"' .. hold.id .. '","status":"' .. hold.status .. '","user":' .. user
        .. ',"items":' .. S.hold_items_json(hold) .. ',"created_at_ms":' .. S.int(hold.created_at_ms)
        .. ',"expires_at_ms":' .. S.int(hold.expires_at_ms) .. ',"finished_at_ms":' .. finished
        .. ',"partition":' .. S.int(S.partition) .. '}'
end

-- A held hold whose deadline has passed is expired now, whether or not a sweep ran.
-- A hold over several partitions expired by a command that then answers an error (confirming
-- it, say) is kept in S.settled, so that the error's reply carries the decision: the server
-- returns its parts at once, not at the next sweep.
function S.settle(hold)
    if hold and hold.status == 'held' and S.now >= hold.expires_at_ms then
        S.apply_returned(hold, 'expired')
        if hold.cross and S.settled then S.settled[#S.settled + 1] = hold end
    end
    return hold
end

-- The hold's JSON is made when the reply is (S.reply_json), once the command is over; a reply
-- the server can make itself is never built (cmd/reserve.lua).
function S.hold_reply(hold, created)
    return { kind = 'hold', hold = hold, created = created, apply = hold.apply,
        attempt = hold.attempt }
end

-- The hold a command names, settled. On the partition a hold id hashes to (route 'dir') a hold
-- that lives elsewhere is found through its directory entry: the answer is then {"moved"}.
-- The entry is written (or looked up, by every command that names the hold) at most a hold's
-- longest lifetime before the hold finishes (HOLD_TTL_MS_MAX, 24 h: an extend goes through it
-- too), and the hold is kept a retention after that, the hold or the confirmed one, whichever is
-- longer: the entry lives that long, and an hour more (S.DIR_EXTRA_MS, library.rs).

function S.dir_ttl_ms()
    return math.max(S.hold_retention_ms, S.confirmed_retention_ms) + S.DIR_EXTRA_MS
end

function S.find_hold(id, route)
    local hold = S.settle(S.hold_get(id))
    if S.visible(hold) then return hold, nil end
    if route == 'dir' and not hold then
        local moved = S.dir_lookup(id)
        if moved then return nil, moved end
    end
    return nil, S.hold_not_found(id)
end

-- The answer that sends a command to the partition HOME (text) where its hold lives. It is a
-- function of the directory entry alone, which no call changes once written: a call whose every
-- answer is one of these answers the same when run again, so it needs no call record (main.lua).
function S.moved(home)
    return { kind = 'raw', json = '{"moved":' .. home .. '}', stop = true, replayable = true }
end

-- The directory entry of a hold whose home is another partition: {"moved"} to it, or nil.
-- Every lookup keeps the entry alive for longer than the hold can be kept.
function S.dir_lookup(id)
    local key = S.key('dir', id)
    local home = redis.call('HGET', key, 'p')
    if not home or tonumber(home) == S.partition then return nil end
    redis.call('PEXPIRE', key, S.int(S.dir_ttl_ms()))
    return S.moved(home)
end

-- A new hold's first stop, on the partition its id hashes to when it lives in partition HOME
-- (text) elsewhere: its directory entry, written unless one is there, and {"moved"} to HOME.
-- nil when a record of the id is here, or an entry was (cmd/reserve.lua then decides, as for
-- any command). The hot path of a hold on a pool of another partition: three writes and reads,
-- and nothing of the request parsed.
function S.dir_write(id, home)
    if redis.call('EXISTS', S.key('hold', id)) == 1 then return nil end
    local key = S.key('dir', id)
    if redis.call('HSETNX', key, 'p', home) == 0 then return nil end
    redis.call('PEXPIRE', key, S.int(S.dir_ttl_ms()))
    return S.moved(home)
end

function S.hold_not_found(id)
    return S.error('hold_not_found', { { 'hold_id', id, 's' } })
end

-- ---------------------------------------------------------------- replies

function S.error(code, fields)
    return { kind = 'error', code = code, fields = fields or {} }
end

function S.reply_json(reply)
    if reply.kind == 'error' then
        local all = { { 'error', reply.code, 's' } }
        for _, f in ipairs(reply.fields) do all[#all + 1] = f end
        local json = S.json_object(all)
        if S.settled and #S.settled > 0 then
            local settled = {}
            for i, hold in ipairs(S.settled) do
                settled[i] = '{"hold":' .. S.hold_json(hold) .. ',"apply":'
                    .. S.json_string(hold.ap or 'return') .. ',"attempt":'
                    .. S.json_string(hold.attempt or '') .. '}'
            end
            json = string.sub(json, 1, -2) .. ',"settled":[' .. table.concat(settled, ',') .. ']}'
        end
        return json
    elseif reply.kind == 'hold' then
        local apply = ''
        if reply.apply then
            apply = ',"apply":' .. S.json_string(reply.apply) .. ',"attempt":'
                .. S.json_string(reply.attempt or '')
        end
        return '{"hold":' .. S.hold_json(reply.hold) .. ',"created":'
            .. (reply.created and 'true' or 'false')
            .. apply .. '}'
    elseif reply.kind == 'pool' then
        return '{"pool":' .. reply.json .. ',"created":' .. (reply.created and 'true' or 'false')
            .. ',"replayed":' .. (reply.replayed and 'true' or 'false') .. '}'
    elseif reply.kind == 'pools' then
        local spread = ''
        if reply.spread and #reply.spread > 0 then
            spread = ',"spread":[' .. table.concat(reply.spread, ',') .. ']'
        end
        return '{"pools":[' .. table.concat(reply.list, ',') .. '],"more":'
            .. (reply.more and 'true' or 'false') .. spread .. '}'
    elseif reply.kind == 'holds' then
        local next = 'null'
        if reply.next then next = S.json_string(reply.next) end
        return '{"holds":[' .. table.concat(reply.list, ',') .. '],"next":' .. next .. '}'
    elseif reply.kind == 'deleted' then
        return '{"deleted":true}'
    elseif reply.kind == 'lock' then
        return S.json_object({ { 'token', reply.token, 'n' }, { 'expires_at_ms', reply.expires_at_ms, 'n' } })
    elseif reply.kind == 'lock_released' then
        return '{"released":true}'
    elseif reply.kind == 'wait' then
        return '{"wait":' .. S.int(reply.ticket) .. '}'
    end
    error('unknown reply kind ' .. tostring(reply.kind))
end
