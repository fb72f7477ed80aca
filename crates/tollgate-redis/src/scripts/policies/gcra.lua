-- redis-policy: gcra code=g format=1 bound=SCALED_TIME
-- gcra.lua: the generic cell rate algorithm (Redis code "g").
--
-- State key: a STRING, the theoretical arrival time scaled by the limit
-- (tat_scaled, see crates/tollgate/src/policy/gcra.rs). One request costs
-- `window` scaled units; the burst tolerance is window * limit.
-- Bounds: (now + 2 * window) * limit <= 2^53 - 1 (the largest scaled time
-- computed, for a rejected request of cost `limit`).
-- Expiry: reset_after_ms + margin after each write: once the TAT has passed,
-- a missing state and the stored one give the same answers.
--
-- The first line declares the file to the Redis store (build.rs reads it):
-- the core policy's name, its Redis code, its stored format version and
-- its bound (a constant of tollgate_redis::policies::Bound).
--
-- KEYS and ARGV: none of its own. It returns a function that builds the
-- policy's table: what the table holds and how the scripts call it is
-- written once, in common.lua above `policies`.

return function()
  local gcra = {}

  function gcra.check_args(limit, window)
  end

  function gcra.bound_ok(now, limit, window)
    return (now + 2 * window) * limit <= MAX_EXACT
  end

  function gcra.load(key, now, limit, window)
    local value = redis.call('GET', key)
    if not value then
      return nil
    end
    local tat = parse_int(value, 'stored TAT of', MAX_EXACT, key)
    -- Every write leaves tat <= now * limit + tolerance, and time never goes
    -- back for a client: anything beyond is not a state this script wrote.
    if tat > (now + window) * limit then
      fail('stored TAT of ' .. key .. ' lies beyond the burst tolerance')
    end
    return { tat = tat }
  end

  local function base_of(state, now_scaled)
    if state and state.tat > now_scaled then
      return state.tat
    end
    return now_scaled
  end

  function gcra.decide(state, now, cost, limit, window)
    local now_scaled = now * limit
    local tolerance = window * limit
    local base = base_of(state, now_scaled)
    if cost <= limit and (base - now_scaled) + cost * window <= tolerance then
      local tat = base + cost * window
      local remaining = divmod(tolerance - (tat - now_scaled), window)
      return decision(true, remaining, 0, wait_until(ceil_div(tat, limit), now))
    end
    local retry = -1
    if cost <= limit then
      local earliest = base + cost * window - tolerance
      retry = wait_until(ceil_div(earliest, limit), now)
    end
    local remaining = divmod(tolerance - (base - now_scaled), window)
    return decision(false, remaining, retry, wait_until(ceil_div(base, limit), now))
  end

  -- Returns the TAT it replaced (-1: none) and 0, for undo.
  function gcra.write(key, state, now, cost, limit, window, margin)
    local tat = base_of(state, now * limit) + cost * window
    local ttl = wait_until(ceil_div(tat, limit), now) + margin
    if ttl < 1 then
      ttl = 1
    end
    redis.call('SET', key, fmt(tat), 'PX', fmt_shared(ttl))
    if state then
      return state.tat, 0
    end
    return -1, 0
  end

  -- Takes back `cost` used at `now` over the TAT `prior` (-1: none), if the
  -- stored TAT is still the one that write stored: every later use raises
  -- it, so an equal TAT means nothing was used since. The expiry stays (it
  -- is at least the one `prior` had, and a TAT that has passed answers as
  -- none). No TAT stored: it expired after it had passed, so the use no
  -- longer counts, and there is nothing to take back (true).
  function gcra.undo(key, now, cost, limit, window, prior, _)
    local state = nil
    if prior >= 0 then
      state = { tat = prior }
    end
    local stored = redis.call('GET', key)
    if not stored then
      return true
    end
    if stored ~= fmt(base_of(state, now * limit) + cost * window) then
      return false
    end
    if state then
      redis.call('SET', key, fmt(prior), 'KEEPTTL')
    else
      redis.call('DEL', key)
    end
    return true
  end

  gcra.anchors = false

  -- The state for inspect.lua: { tat_scaled }.
  function gcra.raw(state)
    if not state then
      return {}
    end
    return { state.tat }
  end

  return gcra
end
