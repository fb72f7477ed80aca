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
-- What stays: the client's last-seen time (a refused call records it too),
-- elements of a sliding log that had left the window at the call's time
-- (no later call is decided before it), and every key's expiry (at least
-- the one the restored state had; a longer one changes no answer, see each
-- policy's undo).
--
-- KEYS[i]      the state key of limit i of the call that consumed from it
--              (every key carries the client's hash tag: one cluster slot)
-- ARGV[1]      now_used: the time the call was decided at (its reply's)
-- ARGV[2]      the call's cost (at least 1)
-- ARGV[5i-2..5i+2] for limit i: the policy's Redis code, limit, window_ms,
--              then the two numbers of the call's reply for limit i (what
--              the policy's write() returned; the first may be -1)
--
-- Returns { r_1, ..., r_n }: r_i = 1 when limit i was restored, or when
-- nothing of the call's use is left to take back (its state expired, or
-- the units left the window), 0 when its state had changed since (kept as
-- it is). Bad arguments raise
-- "TOLLGATE ..." before the first write.

local n = #KEYS
if n < 1 or #ARGV ~= 2 + 5 * n then
  fail('expected n keys and 2 + 5n arguments, got ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
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
for i = 1, n do
  local l = limits[i]
  local done = l.policy.undo(KEYS[i], now, cost, l.limit, l.window, l.undo1, l.undo2)
  restored[i] = done and 1 or 0
end
return restored
