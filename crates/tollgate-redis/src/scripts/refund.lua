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
-- Only where the call's write is: the call's receipt (decide.lua), written
-- by the same script as its state writes and so replicated with them, must
-- be in the client's receipts. A master that lacks it never ran the call:
-- a replica promoted before the call's writes reached it (the old master
-- went on deciding until it learnt of the failover; with replicas_to_ack
-- those calls were not acknowledged, so they are refunded, and the refund
-- goes to the new master). Undone there, the sliding log's undo would take
-- the call's units out of other requests' units logged at the same
-- millisecond (over-admission), and a compare would restore a state that
-- happens to match. So without the receipt the refund writes nothing and
-- answers {} (kept, an error towards admitting less). The store keeps the
-- call's receipt open until its refund has ended (src/receipts.rs), so no
-- later call of the store drops it first.
--
-- Taken back once: each limit restored is marked in the receipt as having
-- nothing left to take back ("x,x", as a limit that did not consume), in
-- the same script as its undo, so a claim of the call (claim.lua) or a
-- copy of the call sent again (decide.lua's answer_again) finds nothing of
-- it left; a limit kept (its state changed since) keeps its undo numbers,
-- for the store's later try (src/refund.rs).
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
-- KEYS[n+2]    the client's receipts key, receipts_key(<last-seen key>)
--              (common.lua), where the call left its receipt
-- ARGV[1]      now_used: the time the call was decided at (its reply's)
-- ARGV[2]      the call's cost (at least 1)
-- ARGV[3]      the call's receipt id, "<tag>:<seq>" (plan.lua's)
-- ARGV[6i-2..6i+3] for limit i: the policy's Redis code, limit, window_ms,
--              the two numbers of the call's reply for limit i (what the
--              policy's write() returned; the first may be -1), and the
--              limit's place in the call's plan, p (its undo numbers are
--              the receipt's p-th pair)
--
-- Returns { r_1, ..., r_n }: r_i = 1 when limit i was restored, or when
-- nothing of the call's use is left to take back (its state expired, the
-- units left the window, or its receipt marks it taken back), 0 when its
-- state had changed since (kept as it is); {} when the call's receipt is
-- not there (nothing done, nothing written); the same answer again when
-- sent again. Bad arguments, or a receipt without the limit's pair, raise
-- "TOLLGATE ..." before the first write.

-- How long a refund's answer is kept for a copy of it sent again: 180 s,
-- far longer than a copy can wait to be sent (the store gives a refund up
-- after 5 s), as long as a receipt.
local REFUND_DONE_KEPT_MS = 180000

local n = #KEYS - 2
if n < 1 or #ARGV ~= 3 + 6 * n then
  fail('expected n + 2 keys and 3 + 6n arguments, got ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end

local now = parse_int(ARGV[1], 'now_ms', MAX_EXACT)
local cost = parse_int(ARGV[2], 'cost', MAX_U32)
if cost < 1 then
  fail('a refund is for a call that used at least 1 unit')
end
local id = receipt_id(ARGV[3])
local limits = {}
for i = 1, n do
  local at = 4 + 6 * (i - 1)
  local policy, limit, window = read_limit(i, ARGV[at], ARGV[at + 1], ARGV[at + 2])
  if not policy.bound_ok(now, limit, window) then
    fail('time ' .. fmt(now) .. ' exceeds the exact range of Redis numbers for limit ' .. i)
  end
  limits[i] = { policy = policy, limit = limit, window = window,
    undo1 = parse_undo(ARGV[at + 3], 'undo number'), undo2 = parse_undo(ARGV[at + 4], 'undo number'),
    place = parse_int(ARGV[at + 5], 'place in the plan', MAX_U32) }
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

-- The call's receipt: where it starts and ends in the client's receipts,
-- and its fields (id, time, then two per limit of the call's plan).
local receipts_at = KEYS[n + 2]
local receipts = redis.call('GET', receipts_at) or ''
local found, stop, fields = find_receipt(receipts, id)
if not found then
  return restored
end
for i = 1, n do
  local p = limits[i].place
  if p < 1 or 2 + 2 * p > #fields then
    fail('receipt ' .. id .. ' of ' .. receipts_at .. ' holds no undo numbers for place ' .. p .. ' (limit ' .. i .. ')')
  end
end

local marked = false
for i = 1, n do
  local l = limits[i]
  local at = 1 + 2 * l.place
  local done = true
  if not (fields[at] == 'x' and fields[at + 1] == 'x') then
    done = l.policy.undo(KEYS[i], now, cost, l.limit, l.window, l.undo1, l.undo2)
    if done then
      fields[at], fields[at + 1] = 'x', 'x'
      marked = true
    end
  end
  restored[i] = done and 1 or 0
end
if marked then
  local receipt = '|' .. table.concat(fields, ',')
  redis.call('SET', receipts_at, string.sub(receipts, 1, found - 1) .. receipt .. string.sub(receipts, stop), 'KEEPTTL')
end
redis.call('SET', done_key, table.concat(restored), 'PX', fmt(REFUND_DONE_KEPT_MS))
return restored
