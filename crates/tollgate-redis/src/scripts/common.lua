-- common.lua: helpers shared by every policy. Prepended to every script
-- (src/policies.rs puts it first in plan, batch, refund, claim and inspect).
--
-- KEYS and ARGV: none of its own (see each driver, plan.lua, batch.lua,
-- refund.lua, claim.lua and inspect.lua, which follows it, the policy
-- chunks and, for plan and batch, decide.lua).
--
-- Lua numbers are doubles: every integer here stays below 2^53, where
-- doubles are exact. Arguments are checked against MAX_EXACT before the
-- script's first write; the Rust side checks the same bounds before calling.

local MAX_EXACT = 9007199254740991 -- 2^53 - 1
local MAX_U32 = 4294967295

-- Raises an error reply "TOLLGATE <message>" (nothing has been written yet
-- whenever this is called: see decide.lua).
local function fail(message)
  error({ err = 'TOLLGATE ' .. message })
end

-- A whole number from a decimal string of at most 16 digits, at most `max`.
-- `what` names it in the error, followed by `of` when given: a name that
-- needs a key or a number is put together only on failure (a string built
-- on every call is a measurable part of a decision).
local function parse_int(value, what, max, of)
  if type(value) ~= 'string' or #value == 0 or #value > 16 or not string.find(value, '^%d+$') then
    if of then what = what .. ' ' .. of end
    fail(what .. ' is not a whole number below 2^53: ' .. tostring(value))
  end
  -- Arithmetic converts a string once; tonumber converts it twice.
  local n = value + 0
  if n > max then
    if of then what = what .. ' ' .. of end
    fail(what .. ' ' .. value .. ' is above its bound ' .. string.format('%d', max))
  end
  return n
end

-- parse_int for an argument that most calls of a batch share (cost, expiry
-- margin, limit, window, a time within one millisecond): a value already
-- parsed in this script run is looked up, not checked and converted again
-- (a table lookup costs a twentieth of parse_int). Only values that passed
-- are kept, and the bound is checked every time. Kept from the second call
-- of a script run on (decide.lua sets keep_args after the first): a script
-- of one call would only pay for filling the table.
local parsed_args = {}
local keep_args = false
local function parse_arg(value, what, max)
  local n = parsed_args[value]
  if not n then
    n = parse_int(value, what, max)
    if keep_args then
      parsed_args[value] = n
    end
  elseif n > max then
    fail(what .. ' ' .. value .. ' is above its bound ' .. string.format('%d', max))
  end
  return n
end

-- The library functions the arithmetic and the formatting call on every
-- decision, looked up once per script run rather than at every call (each
-- lookup is two of a table's).
local floor = math.floor
local format = string.format

-- The decimal string of an exact integer (tostring would give 2e+15).
local function fmt(n)
  return format('%d', n)
end

-- fmt for a number that most calls of a batch share (a key's expiry, the
-- time within one millisecond): formatted once per script run, then looked
-- up (a lookup costs a small part of a formatting).
local formatted = {}
local function fmt_shared(n)
  local text = formatted[n]
  if not text then
    text = fmt(n)
    formatted[n] = text
  end
  return text
end

-- Exact floor division and remainder of non-negative integers below 2^53.
-- For such integers the correctly rounded quotient never crosses an integer,
-- so math.floor(a / b) is already exact; the check against the exact
-- product is a cheap guard that keeps it so should an operand ever exceed
-- that range by a little.
local function divmod(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
    r = r + b
  elseif r >= b then
    q = q + 1
    r = r - b
  end
  return q, r
end

local function ceil_div(a, b)
  local q, r = divmod(a, b)
  if r > 0 then
    q = q + 1
  end
  return q
end

-- Wait from `now` until `at` (0 once `at` has passed).
local function wait_until(at, now)
  if at > now then
    return at - now
  end
  return 0
end

-- A decision: allowed, remaining, retry_after_ms (-1: never), reset_after_ms.
local function decision(allowed, remaining, retry, reset)
  return { allowed = allowed, remaining = remaining, retry = retry, reset = reset }
end

-- The policies by Redis code. src/policies.rs appends one line per policy
-- after this file: policies['<code>'] = (function() <policy file> end)().
-- Each file (src/scripts/policies/) returns a function that builds its
-- table; read_limit calls it on the policy's first use in a script run and
-- keeps the table in its place, so a run builds only the policies its calls
-- use (building one costs Redis as much as a few commands). The drivers
-- pass a policy the state key (KEYS[1 + i] in plan.lua) and limit i's
-- parsed arguments. The table holds:
--   check_args(limit, window): fails on arguments the policy refuses;
--   bound_ok(now, limit, window): whether its arithmetic stays exact;
--   load(key, now, limit, window) -> state, or nil for none;
--   decide(state, now, cost, limit, window) -> decision (below);
--   write(key, state, now, cost, limit, window, margin) -> undo1, undo2:
--     two integers from which undo finds what this write stored and
--     restores what it replaced;
--   undo(key, now, cost, limit, window, undo1, undo2) -> true when it took
--     a consumption back (refund.lua);
--   anchors: whether a first call that used nothing still stores a state;
--   raw(state) -> the loaded state as a list of integers for inspect.lua
--     (empty for no state), which the Redis store decodes into the core
--     policy's state (src/inspect.rs).
local policies = {}

-- Limit i's policy, limit and window from its arguments (policy code,
-- limit, window_ms), checked: a known policy, limit and window at least 1,
-- and what the policy itself asks of them.
local function read_limit(i, code, limit_arg, window_arg)
  local policy = policies[code]
  if not policy then
    fail('unknown policy code ' .. tostring(code) .. ' for limit ' .. i)
  end
  if type(policy) == 'function' then
    policy = policy()
    policies[code] = policy
  end
  local limit = parse_arg(limit_arg, 'limit', MAX_U32)
  local window = parse_arg(window_arg, 'window_ms', MAX_EXACT)
  if limit < 1 then
    fail('limit must be at least 1 (limit ' .. i .. ')')
  end
  if window < 1 then
    fail('window must be at least 1 ms (limit ' .. i .. ')')
  end
  policy.check_args(limit, window)
  return policy, limit, window
end

-- The time of a call: `arg` (now_ms as a decimal), or Redis's TIME in ms
-- when `arg` is "redis" (`redis_us`, read once by the caller).
local function call_time(arg, redis_us)
  if arg == 'redis' then
    return math.floor(redis_us / 1000)
  end
  return parse_arg(arg, 'now_ms', MAX_EXACT)
end

-- The backwards-time rule: the call's time brought up to the client's
-- latest seen time (stored at `seen_key`), then checked against every
-- limit's bound. Returns that time and the stored latest time (nil when
-- none is stored).
local function time_after_seen(seen_key, now, limits)
  local seen_raw = redis.call('GET', seen_key)
  local seen = nil
  if seen_raw then
    seen = parse_int(seen_raw, 'stored last-seen time', MAX_EXACT)
    if seen > now then
      now = seen
    end
  end
  if now > MAX_EXACT then
    fail('time ' .. fmt(now) .. ' exceeds 2^53 - 1')
  end
  for i = 1, #limits do
    local l = limits[i]
    if not l.policy.bound_ok(now, l.limit, l.window) then
      fail('time ' .. fmt(now) .. ' with window_ms ' .. fmt(l.window) .. ' and limit ' .. fmt(l.limit)
        .. ' exceeds the exact range of Redis numbers (2^53 - 1) for limit ' .. i)
    end
  end
  return now, seen
end

-- An undo number (refund.lua, claim.lua): a whole number, or -1 (none).
local function parse_undo(value, what)
  if value == '-1' then
    return -1
  end
  return parse_int(value, what, MAX_EXACT)
end

-- The key of the receipts of a client's open calls (decide.lua), beside
-- its last-seen key `seen_key` ("...:seen"): same hash tag, so same slot.
-- A key of its own, so that the last-seen key keeps the format every
-- version of the scripts reads (servers of two versions share a Redis
-- during a rolling upgrade).
local function receipts_key(seen_key)
  return string.sub(seen_key, 1, -5) .. 'receipts'
end

-- A call's receipt id, "<tag>:<seq>": the store's tag (up to 16 hex
-- digits) and the call's number in the store (decimal); returned as the
-- text and the tag.
local function receipt_id(value)
  local tag = type(value) == 'string' and #value <= 40 and string.match(value, '^(%x+):%d+$')
  if not tag or #tag > 16 then
    fail('receipt id is not <tag>:<seq> (up to 16 hex digits, a colon, a decimal number): ' .. tostring(value))
  end
  return value, tag
end

-- Where call `id`'s receipt is in a client's receipts `value`: its first
-- position, the position just past it, and its comma-separated fields (the
-- id, the time, then two undo numbers per limit); nil when none is stored.
-- Reads only.
local function find_receipt(value, id)
  local found = string.find(value, '|' .. id .. ',', 1, true)
  if not found then
    return nil
  end
  local stop = string.find(value, '|', found + 1, true) or #value + 1
  local fields = {}
  for field in string.gmatch(string.sub(value, found + 1, stop - 1), '[^,]+') do
    fields[#fields + 1] = field
  end
  return found, stop, fields
end

-- The receipt of call `id` in a client's receipts `value` (stored at
-- `key`), read for the call's `limits` (as read_limit reads them): nil when
-- none is stored; else the time the call consumed at, having set each
-- limit's `consumed` and, for one that consumed, its two undo numbers
-- (`undo1`, `undo2`). Raises "TOLLGATE ..." for a receipt that does not
-- hold two undo numbers per limit. Reads only.
local function read_receipt(value, key, id, limits)
  local found, _, fields = find_receipt(value, id)
  if not found then
    return nil
  end
  local n = #limits
  if #fields ~= 2 + 2 * n then
    fail('receipt ' .. id .. ' of ' .. key .. ' holds ' .. (#fields - 2) .. ' undo numbers, not 2 for each of ' .. n .. ' limits')
  end
  local now = parse_int(fields[2], 'time of receipt', MAX_EXACT, id)
  for i = 1, n do
    local l = limits[i]
    local first, second = fields[1 + 2 * i], fields[2 + 2 * i]
    l.consumed = not (first == 'x' and second == 'x')
    if l.consumed then
      if not l.policy.bound_ok(now, l.limit, l.window) then
        fail('time ' .. fmt(now) .. ' exceeds the exact range of Redis numbers for limit ' .. i)
      end
      local what = 'undo number of receipt ' .. id
      l.undo1, l.undo2 = parse_undo(first, what), parse_undo(second, what)
    end
  end
  return now
end
