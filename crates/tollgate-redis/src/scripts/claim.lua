-- claim.lua: takes back what calls of one client consumed when their
-- replies never reached the store (the connection dropped on the way back,
-- say), by the receipts the calls left (decide.lua), and removes the
-- receipts, in one script: so a claim whose own reply is lost can be sent
-- again, and takes nothing back twice (src/lost.rs). The calls are taken
-- back newest first (compare and restore unwinds a chain of one client's
-- calls only that way). Appended after common.lua and the policy chunks
-- (src/policies.rs); each limit's undo is its policy's, as for refund.lua
-- (compare and restore; the sliding log takes the units out).
--
-- Sent only once the calls can no longer start: a call that Redis has not
-- started by its deadline writes nothing (decide.lua's phase 0). So past
-- the deadline, on Redis's clock, a receipt under a call's id is there
-- exactly when the call consumed (unless newer receipts of the client
-- pushed it out, or its receipts expired: see decide.lua). A limit that a
-- refund took back is marked so in the receipt ("x,x", refund.lua), and is
-- not taken back again (the store never both refunds and claims a call:
-- one has its reply, the other none).
--
-- KEYS[1]      the client's last-seen key
-- KEYS[2]      its receipts key, receipts_key(KEYS[1]) (common.lua)
-- KEYS[3..]    every state key of the calls (same slot: the client's).
--              Declared, as every key the script touches, so that while
--              the slot moves between masters (a resharding) Redis runs
--              the script only on a node holding all of them (else
--              TRYAGAIN, or ASK to the other master), never on one that
--              would answer a key not moved yet as a missing one.
-- ARGV[1]      m, the number of calls (at least 1), in the order they
--              were sent
-- then, for each call j in turn: n_j, its number of limits; its 1 + n_j
--              keys (its last-seen key, KEYS[1], then its state keys); its
--              receipt id, deadline (Redis TIME in µs) and cost (at least
--              1); then for each of its limits the policy's Redis code,
--              limit and window_ms
--
-- Returns { -1, redis_time_us } while Redis's time has not passed every
-- call's deadline (nothing read or written: send it again after); else m
-- entries, entry j for call j: { 0 } when no receipt of its id is stored
-- (the call consumed nothing, or was claimed already), or { 1, r_1, ...,
-- r_n } having taken its consumption back and removed its receipt: r_i = 1
-- when limit i was restored (or had nothing to take back), 0 when its
-- state had changed since (kept as it is, towards admitting less). Bad
-- arguments, or a receipt that does not hold two undo numbers per limit,
-- raise "TOLLGATE ..." before any write.

local m = parse_int(ARGV[1], 'number of calls', #ARGV)
if m < 1 then
  fail('a claim is for at least one call')
end

-- Phase 1: every call's arguments, checked, its keys among KEYS.
if #KEYS < 2 or KEYS[2] ~= receipts_key(KEYS[1]) then
  fail('KEYS[2] is not the receipts key of KEYS[1]')
end
local declared = {}
for k = 3, #KEYS do
  declared[KEYS[k]] = true
end
local calls = {}
local at = 2
for j = 1, m do
  local n = parse_int(ARGV[at] or '', 'number of limits of call', #ARGV, j)
  if n < 1 or at + 1 + n + 3 + 3 * n - 1 > #ARGV then
    fail('call ' .. j .. ' of ' .. m .. ' does not fit the arguments')
  end
  local keys = {}
  for k = 1, 1 + n do
    keys[k] = ARGV[at + k]
  end
  if keys[1] ~= KEYS[1] then
    fail('call ' .. j .. ' is not of the client of KEYS[1]')
  end
  for k = 2, 1 + n do
    if not declared[keys[k]] then
      fail('call ' .. j .. '\'s key ' .. k .. ' is not among KEYS')
    end
  end
  local a = at + 2 + n
  local call = { keys = keys, id = receipt_id(ARGV[a]), limits = {},
    deadline = parse_int(ARGV[a + 1], 'deadline', MAX_EXACT), cost = parse_int(ARGV[a + 2], 'cost', MAX_U32) }
  if call.cost < 1 then
    fail('a claim is for a call that used at least 1 unit')
  end
  for i = 1, n do
    local l = a + 3 * i
    local policy, limit, window = read_limit(i, ARGV[l], ARGV[l + 1], ARGV[l + 2])
    call.limits[i] = { policy = policy, limit = limit, window = window }
  end
  calls[j] = call
  at = a + 3 + 3 * n
end
if at ~= #ARGV + 1 then
  fail('the calls add up to ' .. (at - 1) .. ' arguments, got ' .. #ARGV)
end

local clock = redis.call('TIME')
local redis_us = (clock[1] + 0) * 1000000 + (clock[2] + 0)
for j = 1, m do
  if redis_us <= calls[j].deadline then
    return { -1, redis_us }
  end
end

-- Phase 1 for the receipts: each call's found and read, before any write.
local key = KEYS[2]
local value = redis.call('GET', key) or ''
for j = 1, m do
  local call = calls[j]
  call.now = read_receipt(value, key, call.id, call.limits)
end

-- Phase 2: newest first, each found call taken back and its receipt cut.
local replies = {}
local changed = false
for j = m, 1, -1 do
  local call = calls[j]
  if call.now then
    local reply = { 1 }
    for i = 1, #call.limits do
      local l = call.limits[i]
      local done = true
      if l.consumed then
        done = l.policy.undo(call.keys[1 + i], call.now, call.cost, l.limit, l.window, l.undo1, l.undo2)
      end
      reply[#reply + 1] = done and 1 or 0
    end
    local found = string.find(value, '|' .. call.id .. ',', 1, true)
    if found then
      local stop = string.find(value, '|', found + 1, true) or #value + 1
      value = string.sub(value, 1, found - 1) .. string.sub(value, stop)
      changed = true
    end
    replies[j] = reply
  else
    replies[j] = { 0 }
  end
end
if changed then
  if value == '' then
    redis.call('DEL', key)
  else
    redis.call('SET', key, value, 'KEEPTTL')
  end
end
return replies
