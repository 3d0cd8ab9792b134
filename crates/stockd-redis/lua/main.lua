-- main.lua: the library's entry points. `LIBRARY_call` runs a batch of commands in one atomic
-- step; `LIBRARY_events` reads the feed; `LIBRARY_init` and `LIBRARY_accept` write the
-- dataset marker. Nothing here decides a rule: it frames calls and dispatches to C.*.

-- FCALL LIBRARY_call 1 META PARTITION DATASET SEQ_FLOOR NOW HOLD_RET CONFIRMED_RET EVENTS_MAX
--   CALL_ID REV_FLOOR, then groups: GROUP_LEN, then GROUP_LEN commands each as OP ARGC ARGS...
-- A group is one client request: its commands run in order, and a command that parks (a wait)
-- ends its group's run; the server sends the rest once the wait is over. Groups are independent.
-- Returns { next_seq, rev, reply_1, ..., reply_n } with '~' for a command not run, or
-- { '!' .. why } when the dataset is not the one the server knows (nothing was read or written).
-- CALL_ID (Redis Cluster, where the client resends a call whose connection broke): a call seen
-- before (within S.CALL_MEMORY_MS, library.rs) answers what it answered then, instead of running
-- twice.
--
-- `rev` (meta) counts the calls that changed something, evented or not (a lock acquisition, a
-- cross-partition step, a parked waiter): REV_FLOOR is the highest this server saw, so a Redis
-- that lost any change is refused ('dataset_regressed'), not only one that lost an event. A call
-- of reads only (and a sweep that found nothing to do) changes neither `rev` nor any key: an idle
-- fleet writes nothing.
-- Ops that change nothing but what time alone would (a lazy expiry writes events, and counts
-- through them): a call made only of these bumps no `rev` and is not remembered by CALL_ID.
S.READ_OPS = { get_pool = true, get_segments = true, get_hold = true, list_pools = true, list_holds = true,
    x_state = true, part_refundable = true, sweep = true, pop_owner = true,
    seg_get = true }
local function call(keys, argv)
    S.begin(keys[1], argv)
    local refused = S.check_dataset(tonumber(argv[9]))
    if refused then return { '!' .. refused } end
    local call_key = nil
    if argv[8] ~= '' then
        call_key = S.key('call', argv[8])
        local seen = redis.call('GET', call_key)
        if seen then return cjson.decode(seen) end
    end
    local out = { 0, 0 }
    local changes = false
    -- Whether an answer of a change could differ if the call ran again: only then is the call
    -- remembered (a call of directory moves answers the same, S.moved).
    local record = false
    local i = 10
    while i <= #argv do
        local group_len = tonumber(argv[i])
        i = i + 1
        local parked = false
        for _ = 1, group_len do
            local op, argc = argv[i], tonumber(argv[i + 1])
            local args = {}
            for j = 1, argc do args[j] = argv[i + 1 + j] end
            i = i + 2 + argc
            if parked then
                out[#out + 1] = '~'
            else
                local handler = C[op]
                if not handler then
                    S.rev = S.rev + 1
                    S.finish(true)
                    error('stockd: unknown op ' .. tostring(op))
                end
                if not S.READ_OPS[op] then changes = true end
                S.settled = {}
                S.low_checks = {}
                -- A call is not rolled back when it fails: what it kept in memory is written
                -- (and counted in `rev`) before the error goes on, so every command before the
                -- failing one is whole.
                local ran, reply = pcall(function()
                    local reply = handler(args)
                    S.serve_freed()
                    return reply
                end)
                if not ran then
                    S.rev = S.rev + 1
                    S.finish(true)
                    error(reply)
                end
                -- A command that parks, or that must be finished by the server (a hold that
                -- lives elsewhere, a cross-partition step), ends its group's run here.
                if reply.kind == 'wait' or reply.stop then parked = true end
                if not S.READ_OPS[op] and not reply.replayable then record = true end
                local text
                if reply.kind == 'raw' then
                    text = reply.json
                else
                    text = S.reply_json(reply)
                end
                -- Spread pools whose low-stock watch this command crossed: the server checks
                -- them before it answers (segments.lua).
                if #S.low_checks > 0 then
                    text = 'L' .. table.concat(S.low_checks, ',') .. ' ' .. text
                end
                out[#out + 1] = text
            end
        end
    end
    local seq = S.seq
    if S.seq ~= S.seq_at_begin then changes = true end
    if changes then S.rev = S.rev + 1 end
    S.finish(changes)
    out[1] = seq
    out[2] = S.rev
    if call_key and record then
        redis.call('SET', call_key, cjson.encode(out), 'PX', S.int(S.CALL_MEMORY_MS))
    end
    if S.published or #S.woken > 0 then
        redis.call('PUBLISH', S.wake_channel(), S.int(S.partition) .. ' ' .. S.int(seq) .. ' '
            .. table.concat(S.woken, ' '))
    end
    return out
end

local function entry_last_seq(entry)
    return tonumber(string.match(entry[1], '^0%-(%d+)$'))
end

-- The seq of an entry's first event.
local function entry_first_seq(entry)
    local fields = entry[2]
    if fields[1] == 'e' then return entry_last_seq(entry) end
    local _, newlines = string.gsub(fields[4], '\n', '')
    return entry_last_seq(entry) - newlines
end

-- One stream entry's events as { seq, json } pairs, in seq order: a layout-1 entry (`e`) is one
-- event; a layout-2 entry (`at`, `b`: apply.lua, S.flush_events) is a call's events, its id
-- their last seq.
local function entry_events(entry)
    local fields = entry[2]
    local last = entry_last_seq(entry)
    if fields[1] == 'e' then return { { last, fields[2] } } end
    local at, lines = fields[2], {}
    for line in string.gmatch(fields[4], '[^\n]+') do lines[#lines + 1] = line end
    local out = {}
    for i, line in ipairs(lines) do
        local seq = last - #lines + i
        local comma = string.find(line, ',', 1, true)
        local kind = comma and string.sub(line, 1, comma - 1) or line
        local rest = comma and string.sub(line, comma) or ''
        out[i] = { seq, '{"seq":' .. S.int(seq) .. ',"at_ms":' .. at .. ',"type":"' .. kind .. '"'
            .. rest .. '}' }
    end
    return out
end

-- FCALL_RO LIBRARY_events 1 META PARTITION DATASET SEQ_FLOOR AFTER LIMIT EVENT_RETENTION_MAX
-- Returns { '!' .. why }; or { next_seq, oldest_kept_seq } when an event after AFTER is no
-- longer kept (the oldest event kept is past AFTER + 1: the feed answers events_expired); or
-- { next_seq, 0, json_1, ..., json_n } with the events of seq > AFTER, at most LIMIT. The
-- events kept are the newest EVENT_RETENTION_MAX: in layout 1 the stream holds exactly those
-- (trimmed by count); in layout 2 the entry on the window's edge may hold older ones, which are
-- not answered (S.feed_window_start). Mirrors stockd-engine's feed, which decides the same for
-- the embedded backend.
local function events(keys, argv)
    S.begin(keys[1], { argv[1], argv[2], argv[3], '0', '0', '0', argv[6] })
    local refused = S.check_dataset()
    if refused then return { '!' .. refused } end
    local stream = S.key('events')
    local seq = tonumber(redis.call('HGET', S.meta, 'seq') or '0')
    local after = tonumber(argv[4])
    local limit = tonumber(argv[5])
    local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', '1')
    local oldest = 0
    if #first > 0 then
        oldest = entry_first_seq(first[1])
        if S.layout == '2' then
            local last = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', '1')
            oldest = math.max(oldest, S.feed_window_start(entry_last_seq(last[1])))
        end
        -- An AFTER of 2^53 or more (as a double, AFTER + 1 may round to it) is past every seq:
        -- nothing after it was ever dropped.
        if after + 1 < oldest then return { seq, oldest } end
    end
    local out = { seq, 0 }
    -- Seqs stay below 2^53 (exact in a double): no event comes after a larger AFTER, and XRANGE
    -- cannot start after the largest stream id (AFTER = 2^64 - 1) at all. An entry names its
    -- last seq, so the one holding AFTER + 1 is the first after AFTER; each holds one event at
    -- least, so LIMIT entries hold LIMIT events.
    local entries = {}
    if after < S.SEQ_LIMIT then
        entries = redis.call('XRANGE', stream, '(0-' .. argv[4], '+', 'COUNT', argv[5])
    end
    for _, entry in ipairs(entries) do
        for _, event in ipairs(entry_events(entry)) do
            if event[1] > after and event[1] >= oldest and #out - 2 < limit then
                out[#out + 1] = event[2]
            end
        end
    end
    return out
end

-- The layout a new dataset is made in: 2 (a call's events in one stream entry). A dataset made
-- in layout 1 (by stockd_v9 or earlier) stays in it: every call reads and writes it as then.
S.NEW_LAYOUT = '2'

-- FCALL LIBRARY_init 1 META DATASET PARTITIONS [SETTING VALUE]...: writes the marker of a new
-- dataset unless one is there (none when DATASET is ''), and stores each fleet setting (the
-- retention settings, dataset.rs) the dataset has none of yet: a new dataset, or one made by an
-- earlier version, takes the first server's. Returns the marker in place, the partition count,
-- the layout and each SETTING's stored value. Nothing is written in a layout this library does
-- not know.
local function init(keys, argv)
    local meta = redis.call('HMGET', keys[1], 'dataset', 'partitions', 'layout')
    if not meta[1] and argv[1] ~= '' then
        redis.call('HSET', keys[1], 'dataset', argv[1], 'partitions', argv[2],
            'layout', S.NEW_LAYOUT)
        meta = { argv[1], argv[2], S.NEW_LAYOUT }
    end
    local out = { meta[1], meta[2], meta[3] }
    for i = 3, #argv - 1, 2 do
        local stored = redis.call('HGET', keys[1], argv[i])
        if not stored and meta[1] and (meta[3] == '1' or meta[3] == '2') then
            redis.call('HSET', keys[1], argv[i], argv[i + 1])
            stored = argv[i + 1]
        end
        out[#out + 1] = stored
    end
    return out
end

-- FCALL LIBRARY_accept 1 META DATASET PARTITIONS: an operator accepts the dataset Redis has now
-- (after a restart with less, a restore or a failover): a new marker, so that every server
-- forgets the seqs it saw and serves this data.
--
-- Nothing handed out before the loss is handed out again: the values are gone with the data, so
-- every counter whose values leave the library (ACCEPT_COUNTERS) moves up to Redis's clock in
-- microseconds. A partition hands out at most one value of a counter per microsecond, and a
-- counter starts at 0 when its dataset is made (or at the clock, at an accept), so it never
-- passes the clock: the clock now is above every value handed out before, as long as Redis's
-- clock does not go back. The gap this leaves is allowed; the values stay below 2^53.
S.ACCEPT_COUNTERS = { 'seq', 'fence', 'attempt', 'waiter', 'generation', 'pop' }

-- The last id the partition's event stream generated (XADD takes explicit ids `0-SEQ` that must
-- increase), as a seq; 0 without a stream.
local function last_stream_seq(stream)
    if redis.call('EXISTS', stream) == 0 then return 0 end
    local info = redis.call('XINFO', 'STREAM', stream)
    for i = 1, #info - 1, 2 do
        if info[i] == 'last-generated-id' then
            return tonumber(string.match(info[i + 1], '^%d+%-(%d+)$')) or 0
        end
    end
    return 0
end

local function accept(keys, argv)
    local time = redis.call('TIME')
    local floor = tonumber(time[1]) * 1000000 + tonumber(time[2])
    local stream_last = last_stream_seq(string.sub(keys[1], 1, -5) .. 'events')
    floor = math.max(floor, stream_last)
    if floor >= S.SEQ_LIMIT then error('stockd: the Redis clock is past what a seq can hold') end
    for _, counter in ipairs(S.ACCEPT_COUNTERS) do
        if tonumber(redis.call('HGET', keys[1], counter) or '0') < floor then
            redis.call('HSET', keys[1], counter, S.int(floor))
        end
    end
    -- The seq's jump, for the feed's window in layout 2 (S.feed_window_start): the events kept
    -- from before it still count among the newest.
    redis.call('HSET', keys[1], 'jfrom', S.int(stream_last),
        'jto', redis.call('HGET', keys[1], 'seq'))
    -- The layout stays the one the partition has (its stream's entries are in it); a partition
    -- whose meta is gone takes a new dataset's.
    local layout = redis.call('HGET', keys[1], 'layout')
    if layout ~= '1' and layout ~= '2' then layout = S.NEW_LAYOUT end
    redis.call('HSET', keys[1], 'dataset', argv[1], 'partitions', argv[2], 'layout', layout)
    return 'OK'
end

-- Every function carries the library's name (LIBRARY, set by library.rs), so that libraries of
-- two versions load side by side.
redis.register_function(LIBRARY .. '_call', call)
redis.register_function { function_name = LIBRARY .. '_events', callback = events,
    flags = { 'no-writes' } }
redis.register_function(LIBRARY .. '_init', init)
redis.register_function(LIBRARY .. '_accept', accept)
