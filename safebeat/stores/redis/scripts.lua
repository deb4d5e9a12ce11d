-- The Redis store's server-side steps. Each block runs atomically in Redis.
--
-- Conventions:
-- * KEYS[1] is a key of the namespace (so Redis Cluster routes the call to its slot);
--   ARGV[1] is the namespace's key prefix `safebeat:{<namespace>}`. Every key a script
--   touches starts with that prefix, so all of them share one hash slot.
-- * Instants are microseconds since the epoch, kept as decimal STRINGS: Lua turns
--   numbers into text with 14 significant digits, which would round them. Arithmetic
--   goes through tonumber() (exact below 2^53) and back through string.format('%d').
-- * "Now" is Redis TIME, the one clock every replica shares.
--
-- Keys under the prefix P:
--   P:lock                 the tick lock: a token, with a TTL (the only key with a TTL)
--   P:anchor, P:defined, P:last, P:digest, P:schedule
--                          hashes entry -> shared state (see EntryState)
--   P:seq                  dispatch row ids
--   P:claim:<window>:<entry>   the unique dispatch marker of a window -> row id
--   P:row:<id>             hash: one dispatch row
--   P:unsent               zset row id -> claimed_at, rows still `claimed`
--   P:age                  zset row id -> claimed_at, for pruning
--   P:history              zset row id -> window
--   P:history:<entry>      zset row id -> window, one entry's rows
--   P:dispatched:<entry>   zset row id -> window, one entry's rows claimed or sent (what
--                          the newest dispatched window is read by, past any number
--                          of skipped rows)
--   P:dispatched:migrated  set once the rows written before P:dispatched:<entry> existed
--                          are in it (migrate_dispatched)
--   P:paused               hash entry -> 1, or JSON {"until": us or null, "note": text or
--                          null}: the entries paused (safebeat pause)
--   P:audit:seq            audit record ids
--   P:audit:row:<id>       hash: one audit record (at, entry, record as JSON)
--   P:audit                zset id -> at, every audit record (for listing and pruning)
--   P:audit:entry:<entry>  zset id -> at, one entry's audit records
--   P:running:<entry>     zset row id -> started_at, executions started and not finished
--                          (alive while the row's lease_until is after now)
--   P:leases               zset row id -> lease_until, of every entry's executions started
--                          and not finished (the take-over pass finds dead runs by it)
--   P:leases:migrated      set once the leases of runs started before P:leases existed
--                          are in it (migrate_leases)
--   P:replicas, P:started  hashes replica id -> description (JSON), first heartbeat
--   P:heartbeats           zset replica id -> last heartbeat
--   P:effect:<key>         hash: one effect key (owner, task id, recorded and expiry times)
--   P:effects              zset effect key -> expiry, for pruning
--   P:runtime              hash entry -> definition (JSON), entries added at run time
--   P:runtime_version      counter of changes to P:runtime (what replicas look at)

-- name: prelude
-- Prepended to every script below (see RedisStore): helpers they share.

-- Redis TIME as microseconds since the epoch, in decimal text.
-- Slices of this many arguments keep each redis.call within what unpack can pass.
local SLICE = 1000

-- redis.call(command, head..., items...) in slices of `items` (pairs stay whole: SLICE is
-- even); returns the replies of the slices, concatenated when they are lists.
local function in_slices(command, head, items)
    local replies = {}
    for i = 1, #items, SLICE do
        local args = {unpack(head)}
        for j = i, math.min(i + SLICE - 1, #items) do
            args[#args + 1] = items[j]
        end
        local reply = redis.call(command, unpack(args))
        if type(reply) == 'table' then
            for _, value in ipairs(reply) do
                replies[#replies + 1] = value
            end
        end
    end
    return replies
end

local function now_us()
    local t = redis.call('TIME')
    return t[1] .. string.format('%06d', tonumber(t[2]))
end

-- The id and started_at (text) of `entry`'s newest unfinished execution whose lease is
-- alive at `now` (a number), leaving out row `except_id`; false, false if there is none.
local function newest_alive(p, entry, now, except_id)
    local newest, newest_id, newest_text = nil, false, false
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', p .. ':running:' .. entry, '-inf', '+inf')) do
        if id ~= except_id then
            local f = redis.call('HMGET', p .. ':row:' .. id, 'started_at', 'lease_until')
            if f[1] and f[2] and tonumber(f[2]) > now
                    and (newest == nil or tonumber(f[1]) > newest) then
                newest, newest_id, newest_text = tonumber(f[1]), id, f[1]
            end
        end
    end
    return newest_id, newest_text
end

-- The newest started_at (text) of `entry`'s unfinished executions whose lease is alive at
-- `now` (a number), leaving out row `except_id`; false if there is none.
local function alive_since(p, entry, now, except_id)
    local _, since = newest_alive(p, entry, now, except_id)
    return since
end

-- Whether row `id` is for the take-over at `now`: unsent and claimed before
-- `stale_before` while its run is not alive (started, unfinished, with a live lease: see
-- record_rules.unsent_and_stale), or a run whose lease expired without a finish; it has a
-- task id.
-- Returns the row's {status, claimed_at, lease_until, finished_at, task_id, entry} if it
-- is, else false.
local function is_stale(p, id, now, stale_before)
    local f = redis.call('HMGET', p .. ':row:' .. id, 'status', 'claimed_at', 'lease_until',
        'finished_at', 'task_id', 'entry', 'started_at')
    if not f[5] then
        return false
    end
    local alive = f[7] and not f[4] and f[3] and tonumber(f[3]) > tonumber(now)
    local unsent = f[1] == 'claimed' and tonumber(f[2]) < tonumber(stale_before) and not alive
    local dead = f[3] and not f[4] and tonumber(f[3]) <= tonumber(now)
    return (unsent or dead) and f
end

-- Whether a row claimed at `claimed_at` with id `id` comes after the place (`after_at`,
-- `after_id`) in the take-over's order (claim time, then id, as numbers); every row does
-- when `after_at` is ''.
local function after_place(claimed_at, id, after_at, after_id)
    if after_at == '' then
        return true
    end
    local at, place = tonumber(claimed_at), tonumber(after_at)
    return at > place or (at == place and tonumber(id) > tonumber(after_id))
end

-- A page of the claims of every entry left unsent since before `stale_before` (P:unsent)
-- and of the runs whose lease expired by `now` without a finish (P:leases), as {id, entry,
-- claimed_at}: at most `page`, the first after the place (`after_at`, `after_id`; see
-- after_place), in that order. P:unsent is read from the place on and stops after a page
-- (plus the rows of the place's instant and of the page's last one, which one tick wrote
-- each: a set orders the members of one score as text, not as ids); P:leases up to now.
-- So the cost follows a page, never how many claims went stale nor the entries. A member
-- whose row is no longer unsent (P:unsent) or running (P:leases) is dropped from that set
-- on the way.
local function stale_claims(p, now, stale_before, after_at, after_id, page)
    -- Rows found, ids found, and ids looked at per set (the page's last instant is read
    -- again, whole).
    local found, seen, looked = {}, {}, {[':unsent'] = {}, [':leases'] = {}}
    local function look(set, ids, member)
        for _, id in ipairs(ids) do
            if not looked[set][id] then
                looked[set][id] = true
                local f = is_stale(p, id, now, stale_before)
                if f then
                    if not seen[id] and after_place(f[2], id, after_at, after_id) then
                        -- {id, entry, claimed_at}, then the order's keys as numbers
                        found[#found + 1] = {id, f[6], f[2], tonumber(f[2]), tonumber(id)}
                    end
                    seen[id] = true
                elseif not member(p .. ':row:' .. id) then
                    redis.call('ZREM', p .. set, id)
                end
            end
        end
    end
    local function unsent(row)
        return redis.call('HGET', row, 'status') == 'claimed'
    end
    local index, from = p .. ':unsent', '-inf'
    if after_at ~= '' then
        look(':unsent', redis.call('ZRANGEBYSCORE', index, after_at, after_at), unsent)
        from = '(' .. after_at
    end
    local scored = redis.call('ZRANGEBYSCORE', index, from, '(' .. stale_before,
        'WITHSCORES', 'LIMIT', 0, page)
    local ids = {}
    for i = 1, #scored, 2 do
        ids[#ids + 1] = scored[i]
    end
    look(':unsent', ids, unsent)
    if #ids >= page then
        local last = scored[#scored]
        look(':unsent', redis.call('ZRANGEBYSCORE', index, last, last), unsent)
    end
    look(':leases', redis.call('ZRANGEBYSCORE', p .. ':leases', '-inf', now), function(row)
        local f = redis.call('HMGET', row, 'lease_until', 'finished_at')
        return f[1] and not f[2]
    end)
    table.sort(found, function(a, b)
        return a[4] < b[4] or (a[4] == b[4] and a[5] < b[5])
    end)
    local first = {}
    for i = 1, math.min(page, #found) do
        first[i] = {found[i][1], found[i][2], found[i][3]}
    end
    return first
end

-- The id of an entry's newest dispatched (claimed or sent) window, else false: one row,
-- however many skipped rows came after it.
local function newest_dispatched(p, name)
    return redis.call('ZREVRANGE', p .. ':dispatched:' .. name, 0, 0)[1] or false
end

-- Append to `result` one column per field of `fields`: that field of the row each id of
-- `ids` names (false for an id that is false, or a field the row lacks).
local function row_columns(p, ids, fields, result)
    local columns = {}
    for j = 1, #fields do
        columns[j] = {}
    end
    for i, id in ipairs(ids) do
        local f = {}
        if id then
            f = redis.call('HMGET', p .. ':row:' .. id, unpack(fields))
        end
        for j = 1, #fields do
            columns[j][i] = f[j] or false
        end
    end
    for j = 1, #fields do
        result[#result + 1] = columns[j]
    end
end

-- The rows of the newest `limit` ids of the sorted set `index`, newest first: what
-- `read(id)` returns for each, leaving out the ids it returns false for.
local function newest_rows(index, limit, read)
    local rows = {}
    for _, id in ipairs(redis.call('ZREVRANGE', index, 0, tonumber(limit) - 1)) do
        local row = read(id)
        if row then
            rows[#rows + 1] = row
        end
    end
    return rows
end

-- Forget the members of the sorted set `index` scored before `before` (us), at most
-- `batch` of them if given: `forget(id)` deletes what each one names, then it leaves the
-- set. Returns how many were forgotten.
local function prune_before(index, before, batch, forget)
    local ids
    if batch then
        ids = redis.call('ZRANGEBYSCORE', index, '-inf', '(' .. before, 'LIMIT', 0,
            tonumber(batch))
    else
        ids = redis.call('ZRANGEBYSCORE', index, '-inf', '(' .. before)
    end
    for _, id in ipairs(ids) do
        forget(id)
        redis.call('ZREM', index, id)
    end
    return #ids
end

-- Append the state columns of `names` to `result` and return it: anchors, defined,
-- lasts, digests, schedules (false where missing), paused (the P:paused value, or false),
-- then the facts of their rows (safebeat.facts; nothing is decided from them here): the
-- window, started_at, lease_until and task_id of the newest run whose lease is alive,
-- and the window, claimed_at and started_at of the newest dispatched window (false where
-- there is none).
local function load_states(p, names, result)
    for _, field in ipairs({'anchor', 'defined', 'last', 'digest', 'schedule'}) do
        result[#result + 1] = in_slices('HMGET', {p .. ':' .. field}, names)
    end
    result[#result + 1] = in_slices('HMGET', {p .. ':paused'}, names)
    local running, dispatched = {}, {}
    local now = tonumber(now_us())
    for i, name in ipairs(names) do
        running[i] = (newest_alive(p, name, now, false))
        dispatched[i] = newest_dispatched(p, name)
    end
    row_columns(p, running, {'window', 'started_at', 'lease_until', 'task_id'}, result)
    row_columns(p, dispatched, {'window', 'claimed_at', 'started_at'}, result)
    return result
end

-- name: register
-- ARGV: prefix, the registration's instant (us; '' for Redis TIME now), then (name,
-- digest, schedule) triples: one slice of a registration, whose slices all pass the
-- instant the first one returned, so every entry of one registration gets one anchor.
-- Returns {now (the instant used), changed (name, old digest pairs)}; no state is read
-- back. Writes only new or changed entries, never an anchor or last window of a stored
-- one: a registration sent again (a retry, another replica) changes nothing.
local p = ARGV[1]
local now = ARGV[2]
if now == '' then
    now = now_us()
end
local anchor = now:sub(1, -7) .. '000000'
local changed = {}
for i = 3, #ARGV, 3 do
    local name, digest, schedule = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local old = redis.call('HGET', p .. ':digest', name)
    if not old then
        redis.call('HSET', p .. ':anchor', name, anchor)
        redis.call('HSET', p .. ':defined', name, now)
        redis.call('HSET', p .. ':digest', name, digest)
        redis.call('HSET', p .. ':schedule', name, schedule)
    elseif old ~= digest then
        changed[#changed + 1] = name
        changed[#changed + 1] = old
        if redis.call('HGET', p .. ':schedule', name) ~= schedule then
            redis.call('HSET', p .. ':defined', name, now)
            redis.call('HSET', p .. ':schedule', name, schedule)
        end
        redis.call('HSET', p .. ':digest', name, digest)
    end
end
return {now, changed}

-- name: states
-- ARGV: prefix, then entry names (one slice of them: see RedisAdmin.states). Returns the
-- state columns of those names (see load_states); a name not registered has none.
local p = ARGV[1]
local names = {}
for i = 2, #ARGV do
    names[#names + 1] = ARGV[i]
end
return load_states(p, names, {})

-- name: begin_tick
-- KEYS[1]: P:lock. ARGV: prefix, token, ttl_ms, then entry names.
-- Takes the tick lock (SET NX PX) or returns false. Otherwise returns {now,
-- namespace_known (0/1), then the state columns of the names (see load_states)}.
local p = ARGV[1]
if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) then
    return false
end
local now = now_us()
local names = {}
for i = 4, #ARGV do
    names[#names + 1] = ARGV[i]
end
return load_states(p, names, {now, redis.call('EXISTS', p .. ':digest')})

-- name: extend_lock
-- KEYS[1]: P:lock. ARGV: token, ttl_ms. Extends the lock only if this token holds it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0

-- name: release_lock
-- KEYS[1]: P:lock. ARGV: token. Deletes the lock only if this token holds it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0

-- name: finish_tick
-- KEYS[1]: P:lock. ARGV: prefix, token, replica, host, pid, then the counts
-- n_claims, n_skips, n_advances, then the take-over: reclaim timeout (us, '' for none),
-- the place the page starts after (claimed_at in us, '' for the oldest; id) and the page
-- size, then claims (entry, window, task_id, task_name), skips (entry, window, reason,
-- first, count or ''), advances (entry, window).
-- Writes only while this token holds the lock: a replica whose lock expired while it
-- planned writes nothing and gets false. Otherwise inserts rows whose marker is new and
-- whose window is after the entry's stored last window (the fence,
-- safebeat.record_rules.fenced), advances last windows, finds a page of the stale claims (see
-- stale_claims), releases the lock. Returns {now, claimed, stale}.
local p, token, replica, host, pid = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('GET', KEYS[1]) ~= token then
    return false
end
local n_claims, n_skips = tonumber(ARGV[6]), tonumber(ARGV[7])
local n_advances, timeout = tonumber(ARGV[8]), ARGV[9]
local after_at, after_id, page = ARGV[10], ARGV[11], tonumber(ARGV[12])
local now = now_us()
local at = 13

-- The rows the plan inserts: {entry, window, fields, task_id (nil for a skip)}.
local rows = {}
for _ = 1, n_claims do
    local task_id = ARGV[at + 2]
    rows[#rows + 1] = {ARGV[at], ARGV[at + 1],
        {'status', 'claimed', 'task_id', task_id, 'task_name', ARGV[at + 3]}, task_id}
    at = at + 4
end
for _ = 1, n_skips do
    local fields = {'status', 'skipped', 'reason', ARGV[at + 2], 'skipped_from', ARGV[at + 3]}
    if ARGV[at + 4] ~= '' then
        fields[#fields + 1] = 'skipped_count'
        fields[#fields + 1] = ARGV[at + 4]
    end
    rows[#rows + 1] = {ARGV[at], ARGV[at + 1], fields, nil}
    at = at + 5
end

-- A row is written when its marker is new and its window is after the entry's stored last
-- window (else some replica decided it since this plan was made). Nothing below changes
-- a marker or a last window before every row is checked, so the last windows are read
-- at once. (Only commands of the documented ACL user: docs/redis.md.)
local markers, row_entries = {}, {}
for i, row in ipairs(rows) do
    markers[i] = p .. ':claim:' .. row[2] .. ':' .. row[1]
    row_entries[i] = row[1]
end
local lasts = in_slices('HMGET', {p .. ':last'}, row_entries)
local new_rows, seen = {}, {}
for i, row in ipairs(rows) do
    if not seen[markers[i]] and redis.call('EXISTS', markers[i]) == 0
            and not (lasts[i] and tonumber(row[2]) <= tonumber(lasts[i])) then
        seen[markers[i]] = true
        new_rows[#new_rows + 1] = i
    end
end

local claimed = {}
if #new_rows > 0 then
    local ages, history, unsent = {}, {}, {}
    for _, i in ipairs(new_rows) do
        local id, row = redis.call('INCR', p .. ':seq'), rows[i]
        local entry, window = row[1], row[2]
        redis.call('SET', markers[i], id)
        redis.call('HSET', p .. ':row:' .. id, 'entry', entry, 'window', window,
            'replica', replica, 'host', host, 'pid', pid, 'claimed_at', now, 'attempts', '1',
            unpack(row[3]))
        redis.call('ZADD', p .. ':history:' .. entry, window, id)
        if row[4] then
            redis.call('ZADD', p .. ':dispatched:' .. entry, window, id)
        end
        ages[#ages + 1] = now
        ages[#ages + 1] = id
        history[#history + 1] = window
        history[#history + 1] = id
        if row[4] then
            unsent[#unsent + 1] = now
            unsent[#unsent + 1] = id
            claimed[#claimed + 1] = {id, entry, window, row[4]}
        end
    end
    in_slices('ZADD', {p .. ':age'}, ages)
    in_slices('ZADD', {p .. ':history'}, history)
    in_slices('ZADD', {p .. ':unsent'}, unsent)
end

local advance_entries, advance_windows = {}, {}
for _ = 1, n_advances do
    advance_entries[#advance_entries + 1] = ARGV[at]
    advance_windows[#advance_windows + 1] = ARGV[at + 1]
    at = at + 2
end
local registered = in_slices('HMGET', {p .. ':digest'}, advance_entries)
local stored = in_slices('HMGET', {p .. ':last'}, advance_entries)
local advanced = {}
for i, entry in ipairs(advance_entries) do
    local window = advance_windows[i]
    if registered[i] and (not stored[i] or tonumber(window) > tonumber(stored[i])) then
        advanced[#advanced + 1] = entry
        advanced[#advanced + 1] = window
    end
end
in_slices('HSET', {p .. ':last'}, advanced)

local stale = {}
if timeout ~= '' then
    local stale_before = string.format('%d', tonumber(now) - tonumber(timeout))
    stale = stale_claims(p, now, stale_before, after_at, after_id, page)
end

redis.call('DEL', KEYS[1])  -- still ours: checked above, and a script runs alone
return {now, claimed, stale}

-- name: record_publish
-- KEYS[1]: P:unsent. ARGV: prefix, n_sent, the sent ids, then (id, error) pairs of failures.
-- Rows no longer `claimed` are left as they are.
local p = ARGV[1]
local n_sent = tonumber(ARGV[2])
local now = now_us()
local function settle(id, fields)
    local row = p .. ':row:' .. id
    if redis.call('HGET', row, 'status') == 'claimed' then
        redis.call('HSET', row, unpack(fields))
        redis.call('ZREM', KEYS[1], id)
        if fields[2] == 'failed' then
            redis.call('ZREM', p .. ':dispatched:' .. redis.call('HGET', row, 'entry'), id)
        end
    end
end
for i = 3, 2 + n_sent do
    settle(ARGV[i], {'status', 'sent', 'sent_at', now})
end
for i = 3 + n_sent, #ARGV, 2 do
    settle(ARGV[i], {'status', 'failed', 'error', ARGV[i + 1]})
end
return 1

-- name: heartbeat
-- KEYS[1]: P:heartbeats. ARGV: prefix, replica id, description (JSON).
local p = ARGV[1]
local now = now_us()
redis.call('HSETNX', p .. ':started', ARGV[2], now)
redis.call('HSET', p .. ':replicas', ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[1], now, ARGV[2])
return 1

-- name: alive
-- KEYS[1]: P:heartbeats. ARGV: prefix, replica id. A heartbeat whose description did not
-- change: only its time moves. Returns 0, writing nothing, if the description is gone
-- (flushed, pruned): the replica then sends it in full.
if redis.call('HEXISTS', ARGV[1] .. ':replicas', ARGV[2]) == 0 then
    return 0
end
redis.call('ZADD', KEYS[1], now_us(), ARGV[2])
return 1

-- name: patch_definitions
-- KEYS[1]: P:heartbeats. ARGV: prefix, replica id, version, changed digests (JSON object),
-- removed names (JSON array). A heartbeat with the digests that changed: the description
-- takes them and loses the removed names. Returns 0, writing nothing, if the description
-- is gone (flushed, pruned): the replica then sends it in full.
local p = ARGV[1]
local text = redis.call('HGET', p .. ':replicas', ARGV[2])
if not text then
    return 0
end
local description = cjson.decode(text)
local definitions = description['definitions']
for _, name in ipairs(cjson.decode(ARGV[5])) do
    definitions[name] = nil
end
for name, digest in pairs(cjson.decode(ARGV[4])) do
    definitions[name] = digest
end
description['version'] = ARGV[3]
redis.call('HSET', p .. ':replicas', ARGV[2], cjson.encode(description))
redis.call('ZADD', KEYS[1], now_us(), ARGV[2])
return 1

-- name: replicas
-- KEYS[1]: P:heartbeats. ARGV: prefix. Returns (id, description, started, heartbeat) rows.
local p = ARGV[1]
local rows = {}
local beats = redis.call('ZREVRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #beats, 2 do
    local id = beats[i]
    rows[#rows + 1] = {id, redis.call('HGET', p .. ':replicas', id),
        redis.call('HGET', p .. ':started', id), beats[i + 1]}
end
return rows

-- name: history
-- KEYS[1]: P:history or P:history:<entry>. ARGV: prefix, limit.
-- Returns the rows (flat field/value lists) with the newest windows, with their ids.
local p = ARGV[1]
return newest_rows(KEYS[1], ARGV[2], function(id)
    return {id, redis.call('HGETALL', p .. ':row:' .. id)}
end)

-- name: prune
-- KEYS[1]: P:age. ARGV: prefix, before (us), batch size.
-- Deletes up to one batch of rows claimed before `before`; returns how many.
local p = ARGV[1]
return prune_before(KEYS[1], ARGV[2], ARGV[3], function(id)
    local row = p .. ':row:' .. id
    local fields = redis.call('HMGET', row, 'entry', 'window')
    if fields[1] then
        redis.call('DEL', p .. ':claim:' .. fields[2] .. ':' .. fields[1])
        redis.call('ZREM', p .. ':history:' .. fields[1], id)
        redis.call('ZREM', p .. ':dispatched:' .. fields[1], id)
        redis.call('ZREM', p .. ':running:' .. fields[1], id)
    end
    redis.call('DEL', row)
    redis.call('ZREM', p .. ':history', id)
    redis.call('ZREM', p .. ':unsent', id)
    redis.call('ZREM', p .. ':leases', id)
end)

-- name: prune_replicas
-- KEYS[1]: P:heartbeats. ARGV: prefix, before (us). Forgets replicas silent since then.
local p = ARGV[1]
return prune_before(KEYS[1], ARGV[2], nil, function(id)
    redis.call('HDEL', p .. ':replicas', id)
    redis.call('HDEL', p .. ':started', id)
end)

-- name: forget_replica
-- KEYS[1]: P:heartbeats. ARGV: prefix, replica id. Forgets a replica that stopped cleanly.
local p = ARGV[1]
redis.call('HDEL', p .. ':replicas', ARGV[2])
redis.call('HDEL', p .. ':started', ARGV[2])
return redis.call('ZREM', KEYS[1], ARGV[2])

-- name: start_execution
-- KEYS[1]: the window's claim key. ARGV: prefix, entry, worker, retries, lease (us),
-- exclusive (1 for `forbid`, else 0).
-- Returns run, takeover, defer, duplicate or unknown (see record_rules.decide_start).
local p, entry, worker, retries = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local id = redis.call('GET', KEYS[1])
if not id then
    return 'unknown'
end
local row = p .. ':row:' .. id
local fields = redis.call('HMGET', row, 'status', 'task_id', 'started_at', 'finished_at',
    'retries', 'lease_until', 'outcome')
if not fields[1] or fields[1] == 'skipped' or not fields[2] then
    return 'unknown'
end
local now = now_us()
local verdict
if not fields[3] then
    verdict = 'run'
elseif fields[4] then
    -- Only an end that asked for a retry lets a later attempt (higher retries) start.
    if fields[7] ~= 'retry' or tonumber(retries) <= tonumber(fields[5] or '0') then
        redis.call('HINCRBY', row, 'duplicates', 1)
        return 'duplicate'
    end
    verdict = 'run'
elseif fields[6] and tonumber(fields[6]) > tonumber(now) then
    return 'defer'
else
    verdict = 'takeover'
end
if ARGV[6] == '1' and alive_since(p, entry, tonumber(now), id) then
    return 'defer'
end
local lease_until = string.format('%d', tonumber(now) + tonumber(ARGV[5]))
redis.call('HSET', row, 'started_at', now, 'worker', worker, 'retries', retries,
    'lease_until', lease_until)
redis.call('HDEL', row, 'finished_at', 'outcome', 'runtime')
redis.call('HINCRBY', row, 'runs', 1)
redis.call('ZADD', p .. ':running:' .. entry, now, id)
redis.call('ZADD', p .. ':leases', lease_until, id)
return verdict

-- name: renew_executions
-- KEYS[1]: any key of the namespace. ARGV: prefix, lease (us), then (entry, claim key,
-- worker, retries) per run. Extends the lease of each run still this worker's and
-- unfinished; returns how many were.
local p = ARGV[1]
local lease_until = string.format('%d', tonumber(now_us()) + tonumber(ARGV[2]))
local renewed = 0
for i = 3, #ARGV, 4 do
    local id = redis.call('GET', ARGV[i + 1])
    if id then
        local row = p .. ':row:' .. id
        local f = redis.call('HMGET', row, 'worker', 'retries', 'finished_at')
        if f[1] == ARGV[i + 2] and f[2] == ARGV[i + 3] and not f[3] then
            redis.call('HSET', row, 'lease_until', lease_until)
            redis.call('ZADD', p .. ':leases', lease_until, id)
            renewed = renewed + 1
        end
    end
end
return renewed

-- name: finish_execution
-- KEYS[1]: the window's claim key. ARGV: prefix, entry, worker, retries, outcome, runtime
-- (us), detail ('' for none; kept as the row's error).
-- Records the end only of the execution this worker started with these retries.
local p, entry = ARGV[1], ARGV[2]
local id = redis.call('GET', KEYS[1])
if not id then
    return 0
end
local row = p .. ':row:' .. id
local fields = redis.call('HMGET', row, 'worker', 'retries', 'finished_at')
if fields[1] ~= ARGV[3] or fields[2] ~= ARGV[4] or fields[3] then
    return 0
end
local now = now_us()
redis.call('HSET', row, 'finished_at', now, 'outcome', ARGV[5], 'runtime', ARGV[6])
if ARGV[7] and ARGV[7] ~= '' then
    redis.call('HSET', row, 'error', ARGV[7])
end
redis.call('ZREM', p .. ':running:' .. entry, id)
redis.call('ZREM', p .. ':leases', id)
return 1

-- name: claim_effect
-- KEYS[1]: the effect's key. ARGV: prefix, owner, keep_for (us), task id ('' for none).
-- Records the effect unless a record that has not expired exists; returns 1 if recorded.
local p = ARGV[1]
local now = now_us()
local expires = redis.call('HGET', KEYS[1], 'expires_at')
if expires and tonumber(expires) > tonumber(now) then
    return 0
end
local until_ = string.format('%d', tonumber(now) + tonumber(ARGV[3]))
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'recorded_at', now, 'expires_at', until_)
if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], 'task_id', ARGV[4])
end
redis.call('ZADD', p .. ':effects', until_, KEYS[1])
return 1

-- name: release_effect
-- KEYS[1]: the effect's key. ARGV: prefix, owner. Deletes it only if this owner recorded it.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[2] then
    return 0
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', ARGV[1] .. ':effects', KEYS[1])
return 1

-- name: prune_effects
-- KEYS[1]: P:effects. ARGV: batch size. Deletes effect keys whose expiry has passed.
local now = now_us()
local keys = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, key in ipairs(keys) do
    redis.call('DEL', key)
    redis.call('ZREM', KEYS[1], key)
end
return #keys

-- name: set_paused
-- KEYS[1]: P:paused. ARGV: prefix, entry, 1 (pause) or 0 (resume), the value to keep
-- while paused (1, or the JSON of its end and note). Returns 0 if the entry is not
-- registered.
if redis.call('HEXISTS', ARGV[1] .. ':digest', ARGV[2]) == 0 then
    return 0
end
if ARGV[3] == '1' then
    redis.call('HSET', KEYS[1], ARGV[2], ARGV[4])
else
    redis.call('HDEL', KEYS[1], ARGV[2])
end
return 1

-- name: forget_entry
-- KEYS[1]: P:digest. ARGV: prefix, entry. Deletes the entry's shared state; its history
-- and claim markers stay, so its windows stay decided. Returns 0 if it is not registered.
if redis.call('HDEL', KEYS[1], ARGV[2]) == 0 then
    return 0
end
for _, field in ipairs({'anchor', 'defined', 'last', 'schedule', 'paused'}) do
    redis.call('HDEL', ARGV[1] .. ':' .. field, ARGV[2])
end
return 1

-- name: write_windows
-- KEYS[1]: P:seq. ARGV: prefix, replica, host, pid, then rows (entry, window, task_id, task_name,
-- reason): claimed, or skipped where task_id is ''. Inserts a row per window whose claim
-- key is new, with its reason, and leaves last windows alone. Returns, per row, its new id,
-- or false where its window had a row.
local p, replica, host, pid = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now = now_us()
local ids = {}
for i = 5, #ARGV, 5 do
    local entry, window, task_id, task_name = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    local marker = p .. ':claim:' .. window .. ':' .. entry
    local written = false
    if redis.call('EXISTS', marker) == 0 then
        local id = redis.call('INCR', KEYS[1])
        redis.call('SET', marker, id)
        redis.call('HSET', p .. ':row:' .. id, 'entry', entry, 'window', window,
            'replica', replica, 'host', host, 'pid', pid, 'claimed_at', now, 'attempts', '1',
            'reason', ARGV[i + 4])
        if task_id == '' then
            redis.call('HSET', p .. ':row:' .. id, 'status', 'skipped', 'skipped_from', window,
                'skipped_count', '1')
        else
            redis.call('HSET', p .. ':row:' .. id, 'status', 'claimed', 'task_id', task_id,
                'task_name', task_name)
            redis.call('ZADD', p .. ':dispatched:' .. entry, window, id)
            redis.call('ZADD', p .. ':unsent', now, id)
        end
        redis.call('ZADD', p .. ':age', now, id)
        redis.call('ZADD', p .. ':history', window, id)
        redis.call('ZADD', p .. ':history:' .. entry, window, id)
        written = id
    end
    ids[#ids + 1] = written
end
return ids

-- name: record_audit
-- KEYS[1]: P:audit. ARGV: prefix, entry ('' for none), the record as JSON.
-- Appends an audit record at Redis TIME; returns {id, at}.
local p, entry = ARGV[1], ARGV[2]
local now = now_us()
local id = redis.call('INCR', p .. ':audit:seq')
redis.call('HSET', p .. ':audit:row:' .. id, 'at', now, 'entry', entry, 'record', ARGV[3])
redis.call('ZADD', KEYS[1], now, id)
if entry ~= '' then
    redis.call('ZADD', p .. ':audit:entry:' .. entry, now, id)
end
return {id, now}

-- name: audit
-- KEYS[1]: P:audit or P:audit:entry:<entry>. ARGV: prefix, limit.
-- Returns the newest `limit` records {id, at, record JSON}, newest first.
local p = ARGV[1]
return newest_rows(KEYS[1], ARGV[2], function(id)
    local fields = redis.call('HMGET', p .. ':audit:row:' .. id, 'at', 'record')
    return fields[1] and {id, fields[1], fields[2]}
end)

-- name: prune_audit
-- KEYS[1]: P:audit. ARGV: prefix, before (us), batch size.
-- Deletes up to one batch of audit records made before `before`; returns how many.
local p = ARGV[1]
return prune_before(KEYS[1], ARGV[2], ARGV[3], function(id)
    local row = p .. ':audit:row:' .. id
    local entry = redis.call('HGET', row, 'entry')
    if entry and entry ~= '' then
        redis.call('ZREM', p .. ':audit:entry:' .. entry, id)
    end
    redis.call('DEL', row)
end)

-- name: save_runtime_entry
-- KEYS[1]: P:runtime. ARGV: prefix, entry, definition, 1 (replace a stored one) or 0 (add a
-- new one). Returns 0 if nothing was stored (the entry exists, or is missing for replace).
local exists = redis.call('HEXISTS', KEYS[1], ARGV[2])
if (exists == 1) ~= (ARGV[4] == '1') then
    return 0
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('INCR', ARGV[1] .. ':runtime_version')
return 1

-- name: delete_runtime_entry
-- KEYS[1]: P:runtime. ARGV: prefix, entry. Returns 0 if no such entry was stored.
if redis.call('HDEL', KEYS[1], ARGV[2]) == 0 then
    return 0
end
redis.call('INCR', ARGV[1] .. ':runtime_version')
return 1

-- name: take_over
-- KEYS[1]: P:unsent. ARGV: prefix, replica, host, pid, timeout (us), then row ids (those
-- of finish_tick's stale claims beat chose). Each row still stale now (see stale_claims)
-- is claimed again, to be re-published with the same task id: attempts + 1, claimed_at
-- now, this replica's; a row another replica took over meanwhile is left to it. Its lease
-- is cleared, so a dead run is taken once; the delivery of the re-published message
-- takes the run over. Returns {id, entry, window, task_id, attempts} per row taken.
local p, replica, host, pid = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now = now_us()
local stale_before = string.format('%d', tonumber(now) - tonumber(ARGV[5]))
local taken = {}
for i = 6, #ARGV do
    local id = ARGV[i]
    if is_stale(p, id, now, stale_before) then
        local row = p .. ':row:' .. id
        local attempts = redis.call('HINCRBY', row, 'attempts', 1)
        redis.call('HSET', row, 'status', 'claimed', 'claimed_at', now, 'replica', replica,
            'host', host, 'pid', pid)
        redis.call('HDEL', row, 'lease_until')
        redis.call('ZADD', KEYS[1], now, id)
        redis.call('ZADD', p .. ':age', now, id)
        redis.call('ZREM', p .. ':leases', id)
        local f = redis.call('HMGET', row, 'entry', 'window', 'task_id')
        redis.call('ZADD', p .. ':dispatched:' .. f[1], f[2], id)
        taken[#taken + 1] = {tonumber(id), f[1], f[2], f[3], attempts}
    end
end
return taken

-- name: migrate_leases
-- KEYS[1]: P:leases. ARGV: prefix, last (1 for the last slice, else 0), then entries.
-- Runs started before P:leases existed are only in P:running:<entry>: adds the unfinished
-- ones of these entries to P:leases; the last slice marks the namespace migrated
-- (P:leases:migrated), so no replica does it again.
local p = ARGV[1]
for i = 3, #ARGV do
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', p .. ':running:' .. ARGV[i], '-inf', '+inf')) do
        local f = redis.call('HMGET', p .. ':row:' .. id, 'lease_until', 'finished_at')
        if f[1] and not f[2] then
            redis.call('ZADD', KEYS[1], f[1], id)
        end
    end
end
if ARGV[2] == '1' then
    redis.call('SET', p .. ':leases:migrated', '1')
end
return 0

-- name: migrate_dispatched
-- KEYS[1]: P:dispatched:migrated. ARGV: prefix, last (1 for the last slice, else 0), then
-- entries. Rows written before P:dispatched:<entry> existed are only in
-- P:history:<entry>: adds the claimed and sent ones of these entries; the last slice marks
-- the namespace migrated, so no replica does it again.
local p = ARGV[1]
for i = 3, #ARGV do
    local entry = ARGV[i]
    local scored = redis.call('ZRANGEBYSCORE', p .. ':history:' .. entry, '-inf', '+inf',
        'WITHSCORES')
    for j = 1, #scored, 2 do
        local status = redis.call('HGET', p .. ':row:' .. scored[j], 'status')
        if status == 'claimed' or status == 'sent' then
            redis.call('ZADD', p .. ':dispatched:' .. entry, scored[j + 1], scored[j])
        end
    end
end
if ARGV[2] == '1' then
    redis.call('SET', KEYS[1], '1')
end
return 0

-- name: release_claims
-- KEYS[1]: P:unsent. ARGV: prefix, replica, age (us), then (id, attempts) pairs.
-- Claims this replica never handed to the transport, handed back: claimed_at set `age`
-- before now, which the take-over (stale_claims) already counts as stale. Only while each
-- row is still this replica's unsent claim of that attempt: one taken over or recorded
-- since is left alone. Returns how many rows were released.
local p, replica = ARGV[1], ARGV[2]
local claimed_at = string.format('%d', tonumber(now_us()) - tonumber(ARGV[3]))
local released = 0
for i = 4, #ARGV, 2 do
    local id = ARGV[i]
    local row = p .. ':row:' .. id
    local f = redis.call('HMGET', row, 'status', 'replica', 'attempts')
    if f[1] == 'claimed' and f[2] == replica and f[3] == ARGV[i + 1] then
        redis.call('HSET', row, 'claimed_at', claimed_at)
        redis.call('ZADD', KEYS[1], claimed_at, id)
        redis.call('ZADD', p .. ':age', claimed_at, id)
        released = released + 1
    end
end
return released
