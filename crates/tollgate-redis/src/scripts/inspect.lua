-- inspect.lua: reads one client's raw state under every limit of a plan,
-- writing nothing (no state, no anchor, no last-seen time, no expiry).
-- Appended after common.lua and the policy chunks (src/policies.rs), like
-- plan.lua, whose helpers and policy loaders it shares. The Redis store
-- decodes the reply into the core policies' states and computes every
-- number with their arithmetic (tollgate::inspect_plan, src/inspect.rs).
--
-- KEYS[1]      the client's last-seen key (see plan.lua)
-- KEYS[1 + i]  the state key of limit i (i = 1..n), as in plan.lua
-- ARGV[1]      now_ms as a decimal, or "redis" to read Redis's own TIME
-- ARGV[3i-1..3i+1] for limit i: the policy's Redis code, limit, window_ms
--
-- Returns { now_used, then per limit: m, then m integers }: now_used is the
-- time read at (the call's time, or the client's later last-seen time), and
-- the m integers are the limit's stored state as its policy's raw() gives it
-- (m = 0: no state stored).
--
-- Anything wrong (arguments, a stored state no script of this store wrote)
-- raises "TOLLGATE ...", as plan.lua does.

local n = #KEYS - 1
if n < 1 or #ARGV ~= 1 + 3 * n then
  fail('expected 1 + n keys and 1 + 3n arguments, got ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end

local redis_us = 0
if ARGV[1] == 'redis' then
  local clock = redis.call('TIME')
  redis_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
end
local now = call_time(ARGV[1], redis_us)

local limits = {}
for i = 1, n do
  local at = 3 * i - 1
  local policy, limit, window = read_limit(i, ARGV[at], ARGV[at + 1], ARGV[at + 2])
  limits[i] = { policy = policy, limit = limit, window = window, key = KEYS[1 + i] }
end

now = time_after_seen(KEYS[1], now, limits)

local reply = { now }
for i = 1, n do
  local l = limits[i]
  local raw = l.policy.raw(l.policy.load(l.key, now, l.limit, l.window))
  reply[#reply + 1] = #raw
  for j = 1, #raw do
    reply[#reply + 1] = raw[j]
  end
end
return reply
