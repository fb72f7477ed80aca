-- batch.lua: several calls of plan.lua in one script, decided one after
-- another in the order given, exactly as separate calls of plan.lua in that
-- order would be (a script runs alone on its node, so nothing comes between
-- them either way). Appended after common.lua, the policy chunks and
-- decide.lua (src/policies.rs): each call is decide.lua's decide_call.
-- The Redis store sends it when decisions queue up behind one in flight
-- (src/batch.rs): on one node, or on a cluster for the calls whose keys one
-- master holds (src/masters.rs).
--
-- KEYS[1]      a key of call 1 (its last-seen key): it only routes the
--              script to the master that holds it. The calls' own keys are
--              arguments, because on a cluster a script may declare keys of
--              one slot only, while the calls are for clients of many slots.
--              A script without flags (no "#!lua" line) may still touch keys
--              of any slot its node serves; a key its node does not serve
--              raises an error, caught for that call alone (below), before
--              the call has written anything.
-- ARGV[1]      "1" on a Redis Cluster, "0" on one node: on a cluster each
--              call first asks whether its node holds all of its keys (its
--              last-seen key, its state keys and its receipts key), in one
--              EXISTS of them all, so that Redis checks them as it checks a
--              script's declared keys. While the client's slot moves to
--              another master (a resharding) and its keys lie on both, that
--              EXISTS raises an error (TRYAGAIN, ASK) on either master, even
--              on the new one reached after an ASK, which would answer each
--              key not moved yet as a missing one, one at a time: the call
--              fails alone, having written nothing, and is sent alone
--              (plan.lua, its keys declared) once they are together.
-- ARGV[2]      m, the number of calls (at least 1)
-- then, for each call j in turn: n_j, its number of limits; its 1 + n_j
--              keys, laid out as plan.lua's KEYS; its 6 + 4 n_j arguments,
--              laid out as plan.lua's ARGV (its own time, cost, expiry
--              margin, deadline, receipt id and watermark).
--
-- Returns one string holding the m calls' answers in order (below), call
-- j's being plan.lua's reply to it (each call reads TIME when it starts
-- and checks its own deadline: a call that starts after its deadline
-- writes nothing and answers { redis_time_us, -1 }); or, when call j
-- failed, the error reply plan.lua would have raised for it alone, as its
-- text "<CODE> <message>" ("TOLLGATE ..." for its refused arguments or
-- stored state, Redis's own code for an error of a command, e.g. "OOM ..."
-- at its first write, "ERR ... non local key ..." for a key another
-- master serves). A call that fails has written nothing (decide.lua's
-- phases) and the calls after it are decided all the same. A layout that
-- does not add up raises "TOLLGATE ..." before any call.
--
-- Each answer in the string is a kind byte, a count (4 bytes, unsigned),
-- then its content; every number little-endian:
--   0, n, then n numbers of 8 bytes, signed: plan.lua's reply
--   1, n, then n bytes: the error's text
-- (struct.pack's 'i8' truncates a number to an integer, as Redis does when
-- it answers one.) One string for the batch, where an array of arrays of
-- integers costs the store several times as much to parse
-- (src/call/batched.rs); Redis spends about the same either way
-- (BENCHMARKS.md, "A batch's answers in one string").

local on_cluster = ARGV[1] == '1'
local m = parse_int(ARGV[2], 'number of calls', #ARGV)
if m < 1 then
  fail('a batch holds at least one call')
end

-- Where each call's keys and arguments start, checked before any call runs.
local calls = {}
local at = 3
for j = 1, m do
  if at > #ARGV then
    fail('call ' .. j .. ' of ' .. m .. ' has no arguments')
  end
  local n = parse_int(ARGV[at], 'number of limits of call', #ARGV, j)
  calls[j] = { key_at = at, keys = 1 + n, arg_at = at + 1 + n, args = 6 + 4 * n }
  at = at + 1 + (1 + n) + (6 + 4 * n)
end
if at ~= #ARGV + 1 then
  fail('the calls add up to ' .. (at - 1) .. ' arguments, got ' .. #ARGV)
end

-- An error raised inside a call, as the text of the error reply the call
-- would have had alone: "<CODE> <message>". Redis 7's pcall hands over the
-- text of an error reply (e.g. "TOLLGATE ...", "OOM ..."), older ones the
-- table raised; a Lua runtime error has no code, and Redis answers it as ERR.
local function error_text(e)
  if type(e) == 'table' and type(e.err) == 'string' then
    e = e.err
  end
  e = tostring(e)
  if string.find(e, '^[A-Z][A-Z0-9_-]* ') then
    return e
  end
  return 'ERR ' .. e
end

-- A call's answer and an error's, as the batch's reply lays them out.
local answer_formats = {}
local function answer(reply)
  local format = answer_formats[#reply]
  if not format then
    format = '<BI4' .. string.rep('i8', #reply)
    answer_formats[#reply] = format
  end
  return struct.pack(format, 0, #reply, unpack(reply))
end

local function refusal(text)
  return struct.pack('<BI4', 1, #text) .. text
end

-- decide_call, on a cluster once the node has shown that it holds every
-- key of the call (ARGV[1]).
local function decide_here(keys, argv)
  if on_cluster then
    redis.call('EXISTS', receipts_key(keys[1]), unpack(keys))
  end
  return decide_call(keys, argv)
end

local replies = {}
for j = 1, m do
  local c = calls[j]
  -- Each table made at its size in one go: filled one element at a time,
  -- a table grows (and copies itself) at 1, 2, 4 and 8 elements.
  local keys = { unpack(ARGV, c.key_at + 1, c.key_at + c.keys) }
  local argv = { unpack(ARGV, c.arg_at + 1, c.arg_at + c.args) }
  local ok, reply = pcall(decide_here, keys, argv)
  if ok then
    replies[j] = answer(reply)
  else
    replies[j] = refusal(error_text(reply))
  end
end
return table.concat(replies)
