-- decide.lua: one call of the plan script, as a function, so that the
-- single-call driver (plan.lua) and the batch driver (batch.lua) run the same
-- arithmetic. Appended after common.lua and the policy chunks, before the
-- driver (src/policies.rs).
--
-- decide_call(keys, argv, receipts_at) decides and consumes every limit of a
-- plan for one client; `keys` and `argv` are laid out as plan.lua's first
-- 1 + n KEYS and its ARGV (see there); its receipts are at `receipts_at`
-- (plan.lua's declared receipts key), or when nil at receipts_key(keys[1]).
-- It reads Redis's TIME when it starts and checks the call's own deadline
-- against it, so each call of a batch is refused as late, writing nothing,
-- exactly when a separate call starting then would be.
--
-- A call that consumes also leaves a receipt, so that its consumption can
-- be taken back even when its reply never reaches the store (the
-- connection dropped on the way back): the store then claims the receipt
-- by the call's id (claim.lua) once the call's deadline has passed, which
-- takes the call back with the numbers the receipt holds (src/lost.rs). The
-- client's receipts are one string at receipts_key (common.lua), newest
-- first, each "|<tag>:<seq>,<now_used>,<undo1>,<undo2>,..." with two undo
-- numbers per limit ("x,x" for a limit that did not consume), kept for
-- RECEIPTS_KEPT_MS after the client's last consuming call. A receipt is
-- needed only while its call is open (no reply yet, or lost and not yet
-- claimed): a consuming call drops the receipts of its own store (tag)
-- numbered below the call's watermark, under which none of the store's
-- calls for the client is still open, so a client keeps about one receipt
-- per store; and at most RECEIPTS_KEPT_BYTES of them (the oldest go). The
-- receipt also makes a call run once: a call of cost > 0 whose receipt is
-- stored has run, and is answered from it without consuming again
-- (answer_again).
--
-- Returns { redis_time_us, now_used, allowed, then per limit: allowed,
-- remaining, retry_after_ms (-1: never), reset_after_ms }, followed, when
-- the call consumed (allowed, cost > 0), by two numbers per limit: what
-- refund.lua needs to take the consumption back should the caller have
-- given up (the policy's write() returns them; 0, 0 for a limit that did
-- not consume); or, past the deadline, { redis_time_us, -1 } having written
-- nothing.
--
-- Phases: (0) past the deadline, answer late and stop; (1) parse and
-- bound-check every argument, (2) read and check every stored state and
-- decide, (3) write. Anything wrong raises "TOLLGATE ..." in phases 1-2,
-- before the first write, since a failing script does not roll back what it
-- already wrote; a Redis error of phase 3 (OOM) can only come from its
-- first write, before which Redis refuses a script's writes, never after.

-- Receipts beyond this many bytes of a client's receipts are dropped,
-- oldest first: a backstop on the memory of one client. A client's open
-- receipts are those of its calls still in flight, and, after a dropped
-- connection, all of its store's calls since the oldest lost call of its
-- group of slots not yet claimed (the watermark stays there:
-- src/receipts.rs): about the client's consuming calls in one timeout and
-- one round trip. A client making 2,000 a second with a timeout of 100 ms
-- keeps some 200 (11 KiB) while a claim waits; 1 MiB holds some 20,000.
local RECEIPTS_KEPT_BYTES = 1048576

-- The most a key's expiry is lengthened for a call's time ahead of Redis's
-- clock (see ahead_of_redis): a day.
local AHEAD_KEPT_MS = 86400000

-- How long a client's receipts are kept after its last consuming call: 180
-- s, longer than a lost call can wait for its claim (a reply given up on
-- after 5 s at most, then 60 s of tries: src/lost.rs).
local RECEIPTS_KEPT_MS = 180000

-- `receipts` without those of the store tagged `tag` numbered below its
-- `watermark` (closed), and cut to RECEIPTS_KEPT_BYTES.
local function open_receipts(receipts, tag, watermark)
  if receipts == '' then
    return receipts
  end
  local mine = '|' .. tag .. ':'
  local first = string.find(receipts, mine, 1, true)
  if first == 1 and not string.find(receipts, '|', 2, true) then
    -- The usual: one receipt, this store's.
    local seq = string.match(receipts, '^%d+', #mine + 1)
    if seq and seq + 0 < watermark then
      return ''
    end
    return receipts
  end
  if first then
    local kept = {}
    local at = 1
    while at <= #receipts do
      local stop = string.find(receipts, '|', at + 1, true) or #receipts + 1
      local closed = false
      if string.find(receipts, mine, at, true) == at then
        local seq = string.match(receipts, '^%d+', at + #mine)
        closed = seq ~= nil and seq + 0 < watermark
      end
      if not closed then
        kept[#kept + 1] = string.sub(receipts, at, stop - 1)
      end
      at = stop
    end
    receipts = table.concat(kept)
  end
  if #receipts > RECEIPTS_KEPT_BYTES then
    local cut = string.find(receipts, '|', RECEIPTS_KEPT_BYTES, true)
    if cut then
      receipts = string.sub(receipts, 1, cut - 1)
    end
  end
  return receipts
end

-- Stores the receipt of call `id`, which consumed at `now`, in front of the
-- open ones of the client's receipts `receipts`, read from `key` (see
-- open_receipts; `tag` and `watermark` are the call's store's).
-- One concatenation for the usual plan of one limit: each string built is
-- hashed and interned, and later collected.
local function write_receipt(key, receipts, id, tag, watermark, now, limits)
  receipts = open_receipts(receipts, tag, watermark)
  local now_text = fmt_shared(now)
  local value
  if #limits == 1 then
    local l = limits[1]
    value = '|' .. id .. ',' .. now_text .. ',' .. fmt(l.undo1) .. ',' .. fmt(l.undo2) .. receipts
  else
    local parts = { '|', id, ',', now_text }
    for i = 1, #limits do
      local l = limits[i]
      if l.consumed then
        parts[#parts + 1] = ',' .. fmt(l.undo1) .. ',' .. fmt(l.undo2)
      else
        parts[#parts + 1] = ',x,x'
      end
    end
    value = table.concat(parts) .. receipts
  end
  redis.call('SET', key, value, 'PX', fmt_shared(RECEIPTS_KEPT_MS))
end

-- Phase 1 for the limits: limit i's policy, numbers and key from argv
-- (4 each from argv[5]) and keys[1 + i], checked.
local function read_limits(keys, argv, n, margin)
  local limits = {}
  for i = 1, n do
    local at = 1 + 4 * i
    local policy, limit, window = read_limit(i, argv[at], argv[at + 1], argv[at + 2])
    if window + margin > MAX_EXACT then
      fail('window_ms + expiry margin exceeds 2^53 - 1 (limit ' .. i .. ')')
    end
    local shadow = argv[at + 3]
    if shadow ~= '0' and shadow ~= '1' then
      fail('shadow must be 0 or 1 (limit ' .. i .. ')')
    end
    -- Every field a call sets later is named here, so that the table is
    -- made with room for them all (a table that outgrows its room is
    -- rehashed): its state and decision, and what it consumed.
    limits[i] = {
      policy = policy, limit = limit, window = window, shadow = shadow == '1', key = keys[1 + i],
      state = false, decision = false, consumed = false, undo1 = 0, undo2 = 0,
    }
  end
  return limits
end

-- Phase 2: decides every limit on the states as they are; true when the
-- request is allowed (every limit that is not a shadow allows it).
local function decide_limits(limits, now, cost)
  local allowed = true
  for i = 1, #limits do
    local l = limits[i]
    l.state = l.policy.load(l.key, now, l.limit, l.window)
    l.decision = l.policy.decide(l.state, now, cost, l.limit, l.window)
    if not l.decision.allowed and not l.shadow then
      allowed = false
    end
  end
  -- All or nothing: when rejected, a limit that would have taken the
  -- request is reported as it stays.
  if not allowed and cost > 0 then
    for i = 1, #limits do
      local l = limits[i]
      if l.decision.allowed then
        l.decision = l.policy.decide(l.state, now, 0, l.limit, l.window)
      end
    end
  end
  return allowed
end

-- How far `now` (the call's time after the backwards-time rule) runs ahead
-- of Redis's clock: expiries run on Redis's clock but are computed from
-- decision times, so a key written at a time ahead of it would be gone
-- before a caller whose clock is stepped back to the true time had passed
-- that time again, and the client would start afresh within the window of
-- its use, where the memory store keeps its latest seen time and state.
-- So every key lives that much longer: at most AHEAD_KEPT_MS, and never
-- past the exact range (window + margin + the lengthening <= 2^53 - 1).
local function ahead_of_redis(now, redis_us, limits, margin)
  local ahead = now - math.floor(redis_us / 1000)
  if ahead <= 0 then
    return 0
  end
  local room = AHEAD_KEPT_MS
  for i = 1, #limits do
    local left = MAX_EXACT - limits[i].window - margin
    if left < room then
      room = left
    end
  end
  if ahead > room then
    return room
  end
  return ahead
end

-- Phase 3, the writes of every limit that consumes (or anchors). Returns
-- whether any was written, whether any consumed, and the expiry the
-- client's last-seen key needs.
local function write_limits(limits, now, allowed, cost, margin)
  local wrote = false
  local consumed = false
  local seen_ttl = 0
  for i = 1, #limits do
    local l = limits[i]
    local consume = allowed and cost > 0 and l.decision.allowed
    l.consumed = consume
    consumed = consumed or consume
    l.undo1, l.undo2 = 0, 0
    if consume or (l.policy.anchors and not l.state) then
      local used = 0
      if consume then
        used = cost
      end
      local undo1, undo2 = l.policy.write(l.key, l.state, now, used, l.limit, l.window, margin)
      if consume then
        l.undo1, l.undo2 = undo1, undo2
      end
      wrote = true
    end
    -- The last-seen key outlives every state key: each expires within
    -- window + margin of its last write.
    if l.window + margin > seen_ttl then
      seen_ttl = l.window + margin
    end
  end
  return wrote, consumed, seen_ttl
end

-- Phase 3: the client's last-seen time at `seen_key` (`seen`: the stored
-- one, or nil), having written a state key or not (`wrote`).
--
-- Every call records its time, even one that only asks about an unknown
-- client, as the in-memory store does: with the fewest commands that keep
-- the key's value the latest time and its expiry at least the longest of
-- the state keys'. A call that wrote a state key sets the expiry to the
-- longest window + margin of the plan (`seen_ttl`), or keeps a longer one
-- another plan set (PTTL). A call that wrote none changes no state key's
-- expiry, so the one already set still outlives them all: the new time
-- keeps it (KEEPTTL, Redis 6.0 or newer), and a call at the stored time
-- writes nothing. But a time ahead of Redis's clock (`ahead` > 0, see
-- ahead_of_redis) must be kept until a caller stepped back to the true
-- time has passed it again, as the memory store keeps it: such a call
-- lengthens the expiry to `seen_ttl` (which counts `ahead`) when it is
-- shorter.
local function write_seen(seen_key, seen, now, wrote, seen_ttl, ahead)
  local keep = wrote or not seen
  if seen and (wrote or (ahead > 0 and now ~= seen)) then
    local left = redis.call('PTTL', seen_key)
    if left > seen_ttl then
      seen_ttl = left
    end
    keep = true
  end
  if keep then
    redis.call('SET', seen_key, fmt_shared(now), 'PX', fmt_shared(seen_ttl))
  elseif now ~= seen then
    redis.call('SET', seen_key, fmt_shared(now), 'KEEPTTL')
  end
end

-- The reply of one call (see the top of this file).
local function call_reply(redis_us, now, allowed, cost, limits)
  if #limits == 1 then
    -- The usual plan, its reply made at its size in one go (see batch.lua).
    local l = limits[1]
    local d = l.decision
    if allowed and cost > 0 then
      return { redis_us, now, 1, d.allowed and 1 or 0, d.remaining, d.retry, d.reset, l.undo1, l.undo2 }
    end
    return { redis_us, now, allowed and 1 or 0, d.allowed and 1 or 0, d.remaining, d.retry, d.reset }
  end
  local reply = { redis_us, now, allowed and 1 or 0 }
  for i = 1, #limits do
    local d = limits[i].decision
    reply[#reply + 1] = d.allowed and 1 or 0
    reply[#reply + 1] = d.remaining
    reply[#reply + 1] = d.retry
    reply[#reply + 1] = d.reset
  end
  if allowed and cost > 0 then
    for i = 1, #limits do
      reply[#reply + 1] = limits[i].undo1
      reply[#reply + 1] = limits[i].undo2
    end
  end
  return reply
end

-- The answer to a call that has already run: its receipt, of the time
-- `ran_at`, is stored (read_receipt has marked each limit consumed or
-- not). A connection that drops after Redis ran a call makes redis-rs's
-- cluster client send the call again on a new one, since it cannot know
-- whether it ran; run twice, it would consume twice for one request. So it
-- is answered as it was, allowed, with its receipt's time and undo numbers
-- (what a refund or a claim takes back is that one consumption), each
-- limit as it stands now (remaining counts the call once), writing nothing
-- but the receipts' expiry, set again: a write, so that a WAIT behind this
-- call on its new connection (src/replicas.rs) waits until the replicas
-- hold everything written so far, the first run's writes among it, where a
-- connection that wrote nothing is acknowledged at once. (Redis 7.0 moves a
-- connection's WAIT offset after any command; a Redis that moves it only
-- after a write would not wait without this one.)
local function answer_again(receipts_at, seen_key, ran_at, cost, limits, redis_us)
  local now = time_after_seen(seen_key, ran_at, limits)
  for i = 1, #limits do
    local l = limits[i]
    local state = l.policy.load(l.key, now, l.limit, l.window)
    if l.consumed then
      l.decision = l.policy.decide(state, now, 0, l.limit, l.window)
    else
      -- A shadow limit that refused the call, and was not charged.
      l.decision = l.policy.decide(state, now, cost, l.limit, l.window)
      l.decision.allowed = false
      l.undo1, l.undo2 = 0, 0
    end
  end
  local reply = call_reply(redis_us, ran_at, true, cost, limits)
  redis.call('PEXPIRE', receipts_at, fmt_shared(RECEIPTS_KEPT_MS))
  return reply
end

local function decide_call(keys, argv, receipts_at)
  local n = #keys - 1
  if n < 1 or #argv ~= 6 + 4 * n then
    fail('expected 1 + n keys and 6 + 4n arguments, got ' .. #keys .. ' keys and ' .. #argv .. ' arguments')
  end

  -- Phase 0.
  local clock = redis.call('TIME')
  local redis_us = (clock[1] + 0) * 1000000 + (clock[2] + 0)
  if redis_us > parse_int(argv[4], 'deadline', MAX_EXACT) then
    return { redis_us, -1 }
  end

  local now = call_time(argv[1], redis_us)
  local cost = parse_arg(argv[2], 'cost', MAX_U32)
  local margin = parse_arg(argv[3], 'expiry margin', MAX_EXACT)
  local limits = read_limits(keys, argv, n, margin)
  local id, tag = receipt_id(argv[5 + 4 * n])
  local watermark = parse_arg(argv[6 + 4 * n], 'watermark', MAX_EXACT)
  keep_args = true
  -- A call that may consume runs once: sent again, it finds its receipt.
  local at, receipts
  if cost > 0 then
    at = receipts_at or receipts_key(keys[1])
    receipts = redis.call('GET', at) or ''
    local ran_at = read_receipt(receipts, at, id, limits)
    if ran_at then
      return answer_again(at, keys[1], ran_at, cost, limits, redis_us)
    end
  end
  -- The backwards-time rule (reads the last-seen time, checks the bounds).
  local seen
  now, seen = time_after_seen(keys[1], now, limits)
  local allowed = decide_limits(limits, now, cost)
  local ahead = ahead_of_redis(now, redis_us, limits, margin)
  local wrote, consumed, seen_ttl = write_limits(limits, now, allowed, cost, margin + ahead)
  write_seen(keys[1], seen, now, wrote, seen_ttl, ahead)
  if consumed then
    write_receipt(at, receipts, id, tag, watermark, now, limits)
  end
  return call_reply(redis_us, now, allowed, cost, limits)
end
