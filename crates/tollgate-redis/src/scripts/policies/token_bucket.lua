-- redis-policy: token-bucket code=t format=1 bound=TIME_PLUS_WINDOW
-- token_bucket.lua: the token bucket with drips anchored at the first call
-- (Redis code "t").
--
-- State key: a STRING "anchor:full_at": the time of the client's first call
-- and the drip index at which the bucket is full again (see
-- crates/tollgate/src/policy/token_bucket.rs): at drip index k the bucket
-- holds limit - min(max(full_at - k, 0), limit) tokens, and using c tokens
-- moves full_at to max(full_at, k) + c. Drip k falls at anchor + k * interval,
-- interval = window / limit.
-- Bounds: now + window <= 2^53 - 1 (every drip time computed is at most that).
-- Expiry: window + margin after each write. The bucket is full by then, so
-- the expiry forgets only the drip phase: a client idle that long starts full,
-- anchored at its next call, and its next drip may come up to one interval
-- earlier or later than it would have.
--
-- The first line declares the file to the Redis store (build.rs reads it):
-- the core policy's name, its Redis code, its stored format version and
-- its bound (a constant of tollgate_redis::policies::Bound).
--
-- KEYS and ARGV: none of its own. It returns a function that builds the
-- policy's table: what the table holds and how the scripts call it is
-- written once, in common.lua above `policies`.

return function()
  local bucket = {}

  function bucket.check_args(limit, window)
    local _, r = divmod(window, limit)
    if r ~= 0 then
      fail('token-bucket window ' .. fmt(window) .. ' is not a multiple of the limit ' .. fmt(limit))
    end
  end

  function bucket.bound_ok(now, limit, window)
    return now + window <= MAX_EXACT
  end

  function bucket.load(key, now, limit, window)
    local value = redis.call('GET', key)
    if not value then
      return nil
    end
    local a, f = string.match(value, '^(%d+):(%d+)$')
    if not a then
      fail('stored bucket ' .. key .. ' is malformed')
    end
    local anchor = parse_int(a, 'stored anchor of', MAX_EXACT, key)
    local full_at = parse_int(f, 'stored full_at of', MAX_EXACT, key)
    -- Every write leaves anchor <= now and full_at <= k + limit, and time
    -- never goes back for a client: anything else is not a state this script wrote.
    if anchor > now or full_at * divmod(window, limit) > now - anchor + window then
      fail('stored bucket ' .. key .. ' is inconsistent with the time')
    end
    return { anchor = anchor, full_at = full_at }
  end

  local function fresh(state, now)
    if state then
      return state
    end
    return { anchor = now, full_at = 0 }
  end

  local function drips(b, now, interval)
    if now <= b.anchor then
      return 0
    end
    local k = divmod(now - b.anchor, interval)
    return k
  end

  function bucket.decide(state, now, cost, limit, window)
    local b = fresh(state, now)
    local interval = divmod(window, limit)
    local k = drips(b, now, interval)
    local missing = b.full_at - k
    if missing < 0 then
      missing = 0
    elseif missing > limit then
      missing = limit
    end
    local tokens = limit - missing
    if cost <= tokens then
      local full_at = b.full_at
      if cost > 0 then
        full_at = math.max(full_at, k) + cost
      end
      return decision(true, tokens - cost, 0, wait_until(b.anchor + full_at * interval, now))
    end
    local retry = -1
    if cost <= limit then
      local k_enough = b.full_at - (limit - cost)
      retry = wait_until(b.anchor + k_enough * interval, now)
    end
    return decision(false, tokens, retry, wait_until(b.anchor + b.full_at * interval, now))
  end

  -- The bucket `b` after `cost` tokens used at `now`.
  local function used(b, now, cost, limit, window)
    if cost == 0 then
      return b.full_at
    end
    return math.max(b.full_at, drips(b, now, divmod(window, limit))) + cost
  end

  -- Stores the bucket (anchoring a new one), having used `cost` tokens.
  -- Returns the anchor and full_at it replaced (-1, 0: none), for undo.
  function bucket.write(key, state, now, cost, limit, window, margin)
    local b = fresh(state, now)
    local full_at = used(b, now, cost, limit, window)
    local ttl = window + margin
    redis.call('SET', key, string.format('%d:%d', b.anchor, full_at), 'PX', fmt_shared(ttl))
    if state then
      return state.anchor, state.full_at
    end
    return -1, 0
  end

  -- Takes back `cost` used at `now` over the bucket (`anchor`, `full_at`)
  -- (anchor -1: none), if the stored bucket is still the one that write
  -- stored: every later use raises full_at. The bucket goes back to what it
  -- was, or, when there was none, to the bucket anchored at `now` with
  -- every token (what a request refused at `now` leaves). The expiry stays:
  -- at least the one the bucket had. No bucket stored, or one anchored
  -- after `now`: the key expired, the bucket full by then, so the use no
  -- longer counts, and there is nothing to take back (true).
  function bucket.undo(key, now, cost, limit, window, anchor, full_at)
    local b = { anchor = now, full_at = 0 }
    if anchor >= 0 then
      b = { anchor = anchor, full_at = full_at }
    end
    local stored = redis.call('GET', key)
    if not stored then
      return true
    end
    local stored_anchor = string.match(stored, '^(%d+):')
    if stored_anchor and stored_anchor + 0 > b.anchor then
      return true
    end
    if stored ~= string.format('%d:%d', b.anchor, used(b, now, cost, limit, window)) then
      return false
    end
    redis.call('SET', key, string.format('%d:%d', b.anchor, b.full_at), 'KEEPTTL')
    return true
  end

  -- The first call anchors the drips, even one that used nothing.
  bucket.anchors = true

  -- The state for inspect.lua: { anchor, full_at }.
  function bucket.raw(state)
    if not state then
      return {}
    end
    return { state.anchor, state.full_at }
  end

  return bucket
end
