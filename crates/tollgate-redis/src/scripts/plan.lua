-- plan.lua: decides and consumes every limit of a plan for one client,
-- atomically (a Lua script runs alone on its Redis node), in one round trip.
-- Appended after common.lua and the policy chunks (src/policies.rs).
--
-- KEYS[1]      the client's last-seen key: the latest time (ms) seen for the
--              client; a call with an earlier time is answered as at that time.
-- KEYS[1 + i]  the state key of limit i (i = 1..n). All keys carry the
--              client's hash tag, so they share one cluster slot.
-- ARGV[1]      now_ms as a decimal, or "redis" to read Redis's own TIME
-- ARGV[2]      cost (0 only asks)
-- ARGV[3]      expiry margin in ms, added to every key's expiry
-- ARGV[4]      deadline: the latest Redis TIME, in microseconds, at which
--              the script may start (the caller gives up after it)
-- ARGV[1+4i..4+4i] for limit i: the policy's Redis code (the keys of
--              `policies`, one per descriptor in src/policies.rs), limit,
--              window_ms, shadow ("0"/"1")
--
-- Returns { redis_time_us, now_used, allowed, then per limit: allowed,
-- remaining, retry_after_ms (-1: never), reset_after_ms }, where
-- redis_time_us is Redis's TIME when the script started; or, when the script
-- started after its deadline, { redis_time_us, -1 } having written nothing.
--
-- Phases: (0) past the deadline, answer late and stop; (1) parse and
-- bound-check every argument, (2) read and check every stored state and
-- decide, (3) write. Anything wrong raises "TOLLGATE ..." in phases 1-2,
-- before the first write, since a failing script does not roll back what it
-- already wrote.

local n = #KEYS - 1
if n < 1 or #ARGV ~= 4 + 4 * n then
  fail('expected 1 + n keys and 4 + 4n arguments, got ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end

local clock = redis.call('TIME')
local redis_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
if redis_us > parse_int(ARGV[4], 'deadline', MAX_EXACT) then
  return { redis_us, -1 }
end

local now = call_time(ARGV[1], redis_us)
local cost = parse_int(ARGV[2], 'cost', MAX_U32)
local margin = parse_int(ARGV[3], 'expiry margin', MAX_EXACT)

local limits = {}
for i = 1, n do
  local at = 1 + 4 * i
  local policy, limit, window = read_limit(i, ARGV[at], ARGV[at + 1], ARGV[at + 2])
  if window + margin > MAX_EXACT then
    fail('window_ms + expiry margin exceeds 2^53 - 1 (limit ' .. i .. ')')
  end
  local shadow = ARGV[at + 3]
  if shadow ~= '0' and shadow ~= '1' then
    fail('shadow must be 0 or 1 (limit ' .. i .. ')')
  end
  limits[i] = { policy = policy, limit = limit, window = window, shadow = shadow == '1', key = KEYS[1 + i] }
end

-- The backwards-time rule.
local seen
now, seen = time_after_seen(KEYS[1], now, limits)

-- Decide every limit on the states as they are.
local allowed = true
for i = 1, n do
  local l = limits[i]
  l.state = l.policy.load(l.key, now, l.limit, l.window)
  l.decision = l.policy.decide(l.state, now, cost, l.limit, l.window)
  if not l.decision.allowed and not l.shadow then
    allowed = false
  end
end

-- All or nothing: when rejected, a limit that would have taken the request
-- is reported as it stays.
if not allowed and cost > 0 then
  for i = 1, n do
    local l = limits[i]
    if l.decision.allowed then
      l.decision = l.policy.decide(l.state, now, 0, l.limit, l.window)
    end
  end
end

-- Writes start here.
local wrote = false
local seen_ttl = 0
for i = 1, n do
  local l = limits[i]
  local consume = allowed and cost > 0 and l.decision.allowed
  if consume or (l.policy.anchors and not l.state) then
    local used = 0
    if consume then
      used = cost
    end
    l.policy.write(l.key, l.state, now, used, l.limit, l.window, margin)
    wrote = true
  end
  -- The last-seen key outlives every state key: each expires within
  -- window + margin of its last write.
  if l.window + margin > seen_ttl then
    seen_ttl = l.window + margin
  end
end
-- Every call records its time, even one that only asks about an unknown
-- client, as the in-memory store does.
if seen then
  local left = redis.call('PTTL', KEYS[1])
  if left > seen_ttl then
    seen_ttl = left
  end
end
if wrote or now ~= seen then
  redis.call('SET', KEYS[1], fmt(now), 'PX', fmt(seen_ttl))
end

local reply = { redis_us, now, allowed and 1 or 0 }
for i = 1, n do
  local d = limits[i].decision
  reply[#reply + 1] = d.allowed and 1 or 0
  reply[#reply + 1] = d.remaining
  reply[#reply + 1] = d.retry
  reply[#reply + 1] = d.reset
end
return reply
