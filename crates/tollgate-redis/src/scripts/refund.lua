-- refund.lua: takes back what one call of plan.lua (or of batch.lua)
-- consumed, when its caller gave up on it before the answer came (the
-- caller answered by its failure policy, or went away), so that an
-- abandoned call consumes nothing. Appended after common.lua and the
-- policy chunks (src/policies.rs); each limit's undo is its policy's
-- undo(), the mirror of its write().
--
-- Compare and restore, never a blind undo: a limit's state is put back only
-- if it is still exactly what the call stored, so the client's state
-- becomes what it would be had the call been refused. Once another call has
-- used the limit since, an undo could give back what the policy's cap
-- would have wasted in the timeline without the call (a token bucket that
-- refilled to full meanwhile), which over-admits; so that limit keeps the
-- consumption, an error towards admitting less. The sliding log is the
-- exception: it has no cap, only the record of the units allowed, so its
-- undo takes the call's units out wherever later ones were logged (see
-- sliding_window.lua). The store sends the refunds of calls answered
-- together newest first, so that a chain of abandoned calls of one client
-- unwinds (src/refund.rs).
--
-- Run once: a refund whose connection drops is sent again (on a new
-- connection, or by redis-rs's cluster client), since the store cannot know
-- whether Redis ran it; so each refund carries a key of its own, in which
-- its first run leaves its answer for REFUND_DONE_KEPT_MS, and a refund
-- that finds it there answers from it, writing nothing. Run twice, the
-- sliding log's undo would take out another request's units logged at the
-- call's time (and the others' compare would mostly, not always, fail).
--
-- What stays: the client's last-seen time (a refused call records it too),
-- elements of a sliding log that had left the window at the call's time
-- (no later call is decided before it), and every key's expiry (at least
-- the one the restored state had; a longer one changes no answer, see each
-- policy's undo).
--
-- KEYS[i]      the state key of limit i of the call that consumed from it,
--              i = 1..n (every key carries the client's hash tag: one
--              cluster slot)
-- KEYS[n+1]    this refund's own key, <prefix>:{c:<client>}:refund:<id>
--              (src/keys.rs), unique to it: holds its answer once it ran
-- ARGV[1]      now_used: the time the call was decided at (its reply's)
-- ARGV[2]      the call's cost (at least 1)
-- ARGV[5i-2..5i+2] for limit i: the policy's Redis code, limit, window_ms,
--              then the two numbers of the call's reply for limit i (what
--              the policy's write() returned; the first may be -1)
--
-- Returns { r_1, ..., r_n }: r_i = 1 when limit i was restored, or when
-- nothing of the call's use is left to take back (its state expired, or
-- the units left the window), 0 when its state had changed since (kept as
-- it is); the same answer again when sent again. Bad arguments raise
-- "TOLLGATE ..." before the first write.

-- How long a refund's answer is kept for a copy of it sent again: 180 s,
-- far longer than a copy can wait to be sent (the store gives a refund up
-- after 5 s), as long as a receipt.
local REFUND_DONE_KEPT_MS = 180000

local n = #KEYS - 1
if n < 1 or #ARGV ~= 2 + 5 * n then
  fail('expected n + 1 keys and 2 + 5n arguments, got ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end

local now = parse_int(ARGV[1], 'now_ms', MAX_EXACT)
local cost = parse_int(ARGV[2], 'cost', MAX_U32)
if cost < 1 then
  fail('a refund is for a call that used at least 1 unit')
end
local limits = {}
for i = 1, n do
  local at = 3 + 5 * (i - 1)
  local policy, limit, window = read_limit(i, ARGV[at], ARGV[at + 1], ARGV[at + 2])
  if not policy.bound_ok(now, limit, window) then
    fail('time ' .. fmt(now) .. ' exceeds the exact range of Redis numbers for limit ' .. i)
  end
  limits[i] = { policy = policy, limit = limit, window = window,
    undo1 = parse_undo(ARGV[at + 3], 'undo number'), undo2 = parse_undo(ARGV[at + 4], 'undo number') }
end

local restored = {}
local done_key = KEYS[n + 1]
local done_before = redis.call('GET', done_key)
if done_before then
  for r in string.gmatch(done_before, '[01]') do
    restored[#restored + 1] = tonumber(r)
  end
  return restored
end
for i = 1, n do
  local l = limits[i]
  local done = l.policy.undo(KEYS[i], now, cost, l.limit, l.window, l.undo1, l.undo2)
  restored[i] = done and 1 or 0
end
redis.call('SET', done_key, table.concat(restored), 'PX', fmt(REFUND_DONE_KEPT_MS))
return restored
