-- claim.lua: claims the receipt of one call whose reply never reached the
-- store (the connection dropped on the way back, say): returns what
-- refund.lua needs to take the call's consumption back, and removes the
-- receipt, so that the call is refunded at most once (src/lost.rs).
-- Appended after common.lua (src/scripts.rs); it needs no policy.
--
-- Asked only once the call can no longer start: a call that Redis has not
-- started by its deadline writes nothing (decide.lua's phase 0). So past
-- the deadline, on Redis's clock, a receipt under the call's id is there
-- exactly when the call consumed (unless newer receipts of the client
-- pushed it out, or its receipts expired: see decide.lua).
--
-- KEYS[1]      the client's last-seen key (the call's KEYS[1]); its
--              receipts are at receipts_key(KEYS[1]), same slot (common.lua)
-- ARGV[1]      the call's receipt id (its ARGV[5 + 4n], "<tag>:<seq>")
-- ARGV[2]      the call's deadline (its ARGV[4]: Redis TIME in µs)
-- ARGV[3]      n, the call's number of limits
--
-- Returns { -1, redis_time_us } while Redis's time has not passed the
-- deadline (nothing read or written: ask again after it); { 0 } when no
-- receipt of that id is stored; or { 1, now_used, then per limit: 1 when it
-- consumed (0 when not), undo1, undo2 } having removed the receipt (the
-- client's other receipts and their expiry stay). Bad
-- arguments, or a receipt that does not hold two undo numbers per limit,
-- raise "TOLLGATE ..." before any write.

if #KEYS ~= 1 or #ARGV ~= 3 then
  fail('expected 1 key and 3 arguments, got ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end
local id = receipt_id(ARGV[1])
local deadline = parse_int(ARGV[2], 'deadline', MAX_EXACT)
local n = parse_int(ARGV[3], 'number of limits', MAX_U32)

local clock = redis.call('TIME')
local redis_us = (clock[1] + 0) * 1000000 + (clock[2] + 0)
if redis_us <= deadline then
  return { -1, redis_us }
end

local key = receipts_key(KEYS[1])
local value = redis.call('GET', key)
if not value then
  return { 0 }
end
local at = string.find(value, '|' .. id .. ',', 1, true)
if not at then
  return { 0 }
end
local stop = string.find(value, '|', at + 1, true) or #value + 1
local fields = {}
for field in string.gmatch(string.sub(value, at + 1, stop - 1), '[^,]+') do
  fields[#fields + 1] = field
end
if #fields ~= 2 + 2 * n then
  fail('receipt ' .. id .. ' of ' .. key .. ' holds ' .. (#fields - 2) .. ' undo numbers, not 2 for each of ' .. n .. ' limits')
end

-- An undo number as stored: a whole number, or -1 (none).
local function undo_number(text)
  if text == '-1' then
    return -1
  end
  return parse_int(text, 'undo number of receipt ' .. id, MAX_EXACT)
end

local reply = { 1, parse_int(fields[2], 'time of receipt ' .. id, MAX_EXACT) }
for i = 1, n do
  local first, second = fields[1 + 2 * i], fields[2 + 2 * i]
  if first == 'x' and second == 'x' then
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
  else
    reply[#reply + 1] = 1
    reply[#reply + 1] = undo_number(first)
    reply[#reply + 1] = undo_number(second)
  end
end
local rest = string.sub(value, 1, at - 1) .. string.sub(value, stop)
if rest == '' then
  redis.call('DEL', key)
else
  redis.call('SET', key, rest, 'KEEPTTL')
end
return reply
