-- redis-policy: sliding-window code=s format=2 bound=TIME_PLUS_WINDOW
-- sliding_window.lua: the sliding-window log (Redis code "s"), run-length
-- encoded: its size follows the number of allowed requests, not their cost.
--
-- State key: <prefix>:{c:<client>}:<limit id>:v2 (state format 2, see
-- the first line), a Redis LIST with one element per distinct time at which
-- units were allowed, oldest first: "<time>:<count>:<end>", where count >= 1
-- is the units allowed at that time (a request at the time of the newest
-- element adds to it) and end is the running count of units logged up to
-- and including the element, modulo 2^32 (0 before the first element of a
-- new list). The live units never exceed the limit (< 2^32), so the units
-- from element i to element j are count_i + (end_j - end_i mod 2^32): the
-- used count is one subtraction and the element where a number of units
-- have left is a binary search. Elements that left the window are trimmed
-- on the next write. (Format 1, one element per unit, lived under the key
-- without ":v2"; this script never reads it.)
-- Bounds: now + window <= 2^53 - 1; counts and ends are below 2^32, so every
-- sum here stays far below 2^53.
-- Expiry: window + margin after each write that adds an element (the newest
-- entry leaves the window `window` ms after it was logged; the margin covers
-- callers whose clocks run behind Redis's); units added to the newest
-- element, at its time, leave the expiry as that element's write set it.
--
-- The first line declares the file to the Redis store (build.rs reads it):
-- the core policy's name, its Redis code, its stored format version and
-- its bound (a constant of tollgate_redis::policies::Bound).
--
-- KEYS and ARGV: none of its own. It returns a function that builds the
-- policy's table: what the table holds and how the scripts call it is
-- written once, in common.lua above `policies`.

return function()
  local sliding = {}

  local TWO_32 = 4294967296

  -- (a - b) modulo 2^32, for a and b in [0, 2^32).
  local function wrapped_diff(a, b)
    local d = a - b
    if d < 0 then
      d = d + TWO_32
    end
    return d
  end

  -- The time, count and end of `value`, element `index` of the log at `key`,
  -- each checked. (The checks' messages are built only on failure: a string
  -- concatenation per element read is a measurable part of a decision.)
  local function parse_element(key, value, index)
    local t, c, e
    if type(value) == 'string' then
      t, c, e = string.match(value, '^(%d+):(%d+):(%d+)$')
    end
    if not t then
      fail('stored log ' .. key .. ' has a malformed element at ' .. index .. ': '
        .. string.sub(tostring(value), 1, 64))
    end
    local time, count, stop = t + 0, c + 0, e + 0
    if #t > 16 or time > MAX_EXACT or #c > 16 or count > MAX_U32 or #e > 16 or stop > MAX_U32 then
      parse_int(t, 'stored log time of ' .. key, MAX_EXACT)
      parse_int(c, 'stored log count of ' .. key, MAX_U32)
      parse_int(e, 'stored log end of ' .. key, MAX_U32)
    end
    if count < 1 then
      fail('stored log ' .. key .. ' has an element of no units at ' .. index)
    end
    return time, count, stop
  end

  -- How many of the newest elements load reads in one LRANGE: a log shorter
  -- than that is read whole in that one call (a client well under its limit,
  -- or whose requests share milliseconds), and the rest of a longer one only
  -- where needed, one LINDEX per element (a Redis command from a script costs
  -- far more than a list element carried in a reply).
  -- Numbers go to redis.call as decimal strings: Redis would format a Lua
  -- number argument as a double ("%.17g"), which costs more.
  local TAIL = 16
  local TAIL_START = '-16'

  -- Element `index` (0-based) of the loaded log: its time, count and end,
  -- each checked; taken from the newest elements load already holds, or read
  -- with LINDEX, and parsed once.
  local function entry(state, index)
    local parsed = state.parsed[index]
    if not parsed then
      local value
      if index >= state.tail_from then
        value = state.tail[index - state.tail_from + 1]
      else
        value = redis.call('LINDEX', state.key, fmt(index))
      end
      parsed = { parse_element(state.key, value, index) }
      state.parsed[index] = parsed
    end
    return parsed[1], parsed[2], parsed[3]
  end

  function sliding.check_args(limit, window)
  end

  function sliding.bound_ok(now, limit, window)
    return now + window <= MAX_EXACT
  end

  -- The log at `now`: its length, the index of its first element still inside
  -- the window (binary search, the log is sorted), the units still inside,
  -- the running count before them, and its newest element. One LRANGE of the
  -- newest TAIL elements (and an LLEN when there are more); the oldest element
  -- is probed first, since it is usually still live (long windows, steady
  -- traffic), then the oldest element held, so that the search reads elements
  -- with LINDEX only when the window's start lies before the held ones.
  function sliding.load(key, now, limit, window)
    local tail = redis.call('LRANGE', key, TAIL_START, '-1')
    local n = #tail
    if n == 0 then
      return nil
    end
    if n == TAIL then
      n = redis.call('LLEN', key)
    end
    if n > limit then
      fail('stored log ' .. key .. ' holds more than the limit')
    end
    local state = { key = key, n = n, tail = tail, tail_from = n - #tail, parsed = {},
      first = 0, used = 0, base = 0 }
    -- Elements before lo have left the window, elements from hi on have not.
    local lo, hi = 0, n
    if entry(state, 0) + window <= now then
      lo = 1
      local held = state.tail_from
      if held > lo then
        if entry(state, held) + window <= now then
          lo = held + 1
        else
          hi = held
        end
      end
    else
      hi = 0
    end
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if entry(state, mid) + window <= now then
        lo = mid + 1
      else
        hi = mid
      end
    end
    state.first = lo
    state.newest_time, state.newest_count, state.newest_end = entry(state, n - 1)
    if lo < n then
      local time, count, stop = entry(state, lo)
      state.first_time, state.first_count = time, count
      state.base = wrapped_diff(stop, count)
      state.used = wrapped_diff(state.newest_end, state.base)
      if state.used < 1 or state.used > limit then
        fail('stored log ' .. key .. ' holds ' .. fmt(state.used) .. ' units, outside 1..limit')
      end
    end
    return state
  end

  function sliding.decide(state, now, cost, limit, window)
    local used = 0
    if state then
      used = state.used
    end
    local available = limit - used
    local newest_reset = 0
    if used > 0 then
      newest_reset = wait_until(state.newest_time + window, now)
    end
    if cost <= available then
      local reset = newest_reset
      if cost > 0 then
        reset = window
      end
      return decision(true, available - cost, 0, reset)
    end
    -- Rejected (so some units are live): the request fits once `excess` live
    -- units have left, the last of them in the first element whose end is
    -- `excess` or more past the base. Those distances increase from the first
    -- live element on (they are at most `used`, so never wrap).
    -- The common case, a client at its limit asking for a little more, ends
    -- at the first live element, already read: no search then.
    local retry = -1
    if cost <= limit then
      local excess = cost - available
      local time = state.first_time
      if excess > state.first_count then
        local lo, hi = state.first + 1, state.n - 1
        while lo < hi do
          local mid = math.floor((lo + hi) / 2)
          local _, _, stop = entry(state, mid)
          if wrapped_diff(stop, state.base) < excess then
            lo = mid + 1
          else
            hi = mid
          end
        end
        time = entry(state, lo)
      end
      retry = wait_until(time + window, now)
    end
    return decision(false, available, retry, newest_reset)
  end

  -- Logs `cost` units at `now` (after dropping elements that left the window);
  -- sets the expiry: window + margin from this write, or, when the units
  -- only join the newest element (same time), from the write that logged it,
  -- left as it was: the newest element's time, which the expiry is for, has
  -- not changed (one PEXPIRE less for requests that share a millisecond).
  -- Returns the count and end of the newest element it leaves, for undo.
  function sliding.write(key, state, now, cost, limit, window, margin)
    local last_end = 0
    local merge = false
    if state then
      if state.first >= state.n then
        -- Nothing live: a new list, its running count from 0 again.
        redis.call('DEL', key)
      else
        if state.first > 0 then
          redis.call('LTRIM', key, fmt(state.first), '-1')
        end
        last_end = state.newest_end
        merge = state.newest_time == now
      end
    end
    local count, stop = 0, last_end
    if cost > 0 then
      stop = last_end + cost
      if stop >= TWO_32 then
        stop = stop - TWO_32
      end
      count = cost
      if merge then
        count = state.newest_count + cost
        redis.call('LSET', key, '-1', string.format('%d:%d:%d', now, count, stop))
      else
        redis.call('RPUSH', key, string.format('%d:%d:%d', now, cost, stop))
      end
    end
    if not (merge and cost > 0) then
      redis.call('PEXPIRE', key, fmt_shared(window + margin))
    end
    return count, stop
  end

  -- Takes back `cost` units logged at `now` by a write that left the newest
  -- element `now:count:stop`. Exact even after later writes: the log is the
  -- record of the units allowed, with no cap to interact with, so removing
  -- the call's units leaves exactly the log of the others (the answers
  -- given meanwhile, with those units still counted, stay as given). Its
  -- element is the one of time `now` (times are unique and sorted): found
  -- at once when it is still the newest as written, else by a binary
  -- search; its count loses `cost` (the element goes when nothing is left
  -- of it), and the running end of it and of every later element loses
  -- `cost`. No element of time `now`: the units left the window (trimmed,
  -- or the log expired or began again), so they no longer count, and there
  -- is nothing to take back. Elements that write trimmed had left the
  -- window at `now`, and no call of the client is decided before `now`
  -- again (its last-seen time is `now` or later), so they stay gone. The
  -- expiry stays: at least the one the log had. True unless the element
  -- holds fewer than `cost` units (not a state this store wrote).
  function sliding.undo(key, now, cost, limit, window, count, stop)
    local newest = redis.call('LINDEX', key, '-1')
    if not newest then
      return true
    end
    if newest == string.format('%d:%d:%d', now, count, stop) then
      if count == cost then
        redis.call('RPOP', key)
      else
        redis.call('LSET', key, '-1', string.format('%d:%d:%d', now, count - cost, wrapped_diff(stop, cost)))
      end
      return true
    end
    -- The first element whose time is `now` or later.
    local n = redis.call('LLEN', key)
    local lo, hi = 0, n
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local time = parse_element(key, redis.call('LINDEX', key, fmt(mid)), mid)
      if time < now then
        lo = mid + 1
      else
        hi = mid
      end
    end
    if lo >= n then
      return true
    end
    local from = redis.call('LRANGE', key, fmt(lo), '-1')
    local time, units, last = parse_element(key, from[1], lo)
    if time ~= now then
      return true
    end
    if units < cost then
      return false
    end
    for j = 2, #from do
      local t, c, e = parse_element(key, from[j], lo + j - 1)
      redis.call('LSET', key, fmt(lo + j - 1), string.format('%d:%d:%d', t, c, wrapped_diff(e, cost)))
    end
    if units == cost then
      redis.call('LSET', key, fmt(lo), 'refunded')
      redis.call('LREM', key, '1', 'refunded')
    else
      redis.call('LSET', key, fmt(lo), string.format('%d:%d:%d', now, units - cost, wrapped_diff(last, cost)))
    end
    return true
  end

  -- Only allowed requests change the log; a first call that used nothing
  -- stores nothing.
  sliding.anchors = false

  -- The most elements inspect.lua reads: a log read whole would hold Redis,
  -- and fill its output buffer, for as long as the log is long (a limit of
  -- a million has logs a second long to read), stalling every other
  -- client's decision. Past it, the later units are one run at the newest
  -- element's time: the numbers the store computes from the log (the units
  -- in the window, the wait until the oldest leaves, the reset when the
  -- newest does) are the same; only the log shown is cut.
  local INSPECT_RUNS = 1000

  -- The state for inspect.lua: the elements still inside the window, oldest
  -- first, as { time_1, count_1, time_2, count_2, ... } (one LRANGE), at
  -- most INSPECT_RUNS of them, the last standing for every later unit.
  function sliding.raw(state)
    local out = {}
    if not state or state.first >= state.n then
      return out
    end
    local newest = state.n - 1
    local upto = newest
    if state.n - state.first > INSPECT_RUNS then
      upto = state.first + INSPECT_RUNS - 2
    end
    local values = redis.call('LRANGE', state.key, fmt(state.first), fmt(upto))
    local stop = 0
    for j = 1, #values do
      local time, count, e = parse_element(state.key, values[j], state.first + j - 1)
      out[#out + 1] = time
      out[#out + 1] = count
      stop = e
    end
    if upto < newest then
      local value = redis.call('LINDEX', state.key, fmt(newest))
      local time, _, e = parse_element(state.key, value, newest)
      out[#out + 1] = time
      out[#out + 1] = wrapped_diff(e, stop)
    end
    return out
  end

  return sliding
end
