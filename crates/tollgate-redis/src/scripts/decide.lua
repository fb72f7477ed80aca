-- decide.lua: one call of the plan script, as a function, so that the
-- single-call driver (plan.lua) and the batch driver (batch.lua) run the same
-- arithmetic. Appended after common.lua and the policy chunks, before the
-- driver (src/policies.rs).
--
-- decide_call(keys, argv) decides and consumes every limit of a plan for one
-- client; `keys` and `argv` are laid out as plan.lua's KEYS and ARGV (see
-- there). It reads Redis's TIME when it starts and checks the call's own
-- deadline against it, so each call of a batch is refused as late, writing
-- nothing, exactly when a separate call starting then would be.
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
    limits[i] = { policy = policy, limit = limit, window = window, shadow = shadow == '1', key = keys[1 + i] }
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

-- Phase 3, the writes: every limit that consumes (or anchors), then the
-- client's last-seen time at `seen_key` (`seen`: the stored one, or nil).
local function write_limits(seen_key, seen, limits, now, allowed, cost, margin)
  local wrote = false
  local seen_ttl = 0
  for i = 1, #limits do
    local l = limits[i]
    local consume = allowed and cost > 0 and l.decision.allowed
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
  -- Every call records its time, even one that only asks about an unknown
  -- client, as the in-memory store does: with the fewest commands that keep
  -- the key's value the latest time and its expiry at least the longest of
  -- the state keys'. A call that wrote a state key sets the expiry to the
  -- longest window + margin of the plan, or keeps a longer one another plan
  -- set (PTTL). A call that wrote none changes no state key's expiry, so
  -- the one already set still outlives them all: the new time keeps it
  -- (KEEPTTL, Redis 6.0 or newer), and a call at the stored time writes
  -- nothing.
  if wrote or not seen then
    if seen then
      local left = redis.call('PTTL', seen_key)
      if left > seen_ttl then
        seen_ttl = left
      end
    end
    redis.call('SET', seen_key, fmt(now), 'PX', fmt(seen_ttl))
  elseif now ~= seen then
    redis.call('SET', seen_key, fmt(now), 'KEEPTTL')
  end
end

-- The reply of one call (see the top of this file).
local function call_reply(redis_us, now, allowed, cost, limits)
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

local function decide_call(keys, argv)
  local n = #keys - 1
  if n < 1 or #argv ~= 4 + 4 * n then
    fail('expected 1 + n keys and 4 + 4n arguments, got ' .. #keys .. ' keys and ' .. #argv .. ' arguments')
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
  -- The backwards-time rule (reads the last-seen time, checks the bounds).
  local seen
  now, seen = time_after_seen(keys[1], now, limits)
  local allowed = decide_limits(limits, now, cost)
  write_limits(keys[1], seen, limits, now, allowed, cost, margin)
  keep_args = true
  return call_reply(redis_us, now, allowed, cost, limits)
end
