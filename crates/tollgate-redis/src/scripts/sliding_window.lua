-- sliding_window.lua: the sliding-window log (policy code "s").
--
-- State key: a Redis LIST of the times (decimal ms) of allowed units, oldest
-- first, at most `limit` long; a request of cost c logs its time c times.
-- Entries that left the window are trimmed on the next write.
-- Bounds: now + window <= 2^53 - 1.
-- Expiry: window + margin after each write (the newest entry leaves the
-- window `window` ms after it was logged; the margin covers callers whose
-- clocks run behind Redis's).

local sliding = {}

local function log_time(key, index)
  local value = redis.call('LINDEX', key, index)
  return parse_int(value, 'stored log time of ' .. key, MAX_EXACT)
end

function sliding.check_args(limit, window)
end

function sliding.bound_ok(now, limit, window)
  return now + window <= MAX_EXACT
end

-- The live part of the log at `now`: its length and the index of its first
-- entry still inside the window (binary search, the log is sorted).
function sliding.load(key, now, limit, window)
  local n = redis.call('LLEN', key)
  if n == 0 then
    return nil
  end
  if n > limit then
    fail('stored log ' .. key .. ' holds more than the limit')
  end
  local lo, hi = 0, n
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if log_time(key, mid) + window <= now then
      lo = mid + 1
    else
      hi = mid
    end
  end
  return { key = key, n = n, first = lo }
end

function sliding.decide(state, now, cost, limit, window)
  local n, first = 0, 0
  if state then
    n, first = state.n, state.first
  end
  local used = n - first
  local available = 0
  if limit > used then
    available = limit - used
  end
  local newest_reset = 0
  if used > 0 then
    newest_reset = wait_until(log_time(state.key, n - 1) + window, now)
  end
  if cost <= available then
    local reset = newest_reset
    if cost > 0 then
      reset = window
    end
    return decision(true, available - cost, 0, reset)
  end
  local retry = -1
  if cost <= limit then
    local excess = cost - available
    retry = wait_until(log_time(state.key, first + excess - 1) + window, now)
  end
  return decision(false, available, retry, newest_reset)
end

-- Logs `cost` units at `now` (after dropping entries that left the window);
-- returns the expiry set.
function sliding.write(key, state, now, cost, limit, window, margin)
  if state and state.first > 0 then
    if state.first >= state.n then
      redis.call('DEL', key)
    else
      redis.call('LTRIM', key, state.first, -1)
    end
  end
  local stamp = fmt(now)
  local left = cost
  while left > 0 do
    local batch = {}
    for i = 1, math.min(left, 1000) do
      batch[i] = stamp
    end
    redis.call('RPUSH', key, unpack(batch))
    left = left - #batch
  end
  local ttl = window + margin
  redis.call('PEXPIRE', key, fmt(ttl))
  return ttl
end

-- Only allowed requests change the log; a first call that used nothing
-- stores nothing.
sliding.anchors = false
