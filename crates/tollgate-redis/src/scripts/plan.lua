-- plan.lua: decides and consumes every limit of a plan for one client,
-- atomically (a Lua script runs alone on its Redis node), in one round trip.
-- Appended after common.lua, the policy chunks and decide.lua
-- (src/policies.rs): the arithmetic is decide.lua's decide_call, which
-- batch.lua runs too.
--
-- KEYS[1]      the client's last-seen key: the latest time (ms) seen for the
--              client; a call with an earlier time is answered as at that time.
-- KEYS[1 + i]  the state key of limit i (i = 1..n). All keys carry the
--              client's hash tag, so they share one cluster slot.
-- KEYS[2 + n]  the client's receipts key (see decide.lua): the store passes
--              receipts_key(KEYS[1]) (common.lua), where batch.lua and
--              claim.lua find them. Declared, as every key the script
--              touches, so that while the slot moves between masters (a
--              resharding) Redis runs the script only on a node holding all
--              of them (else TRYAGAIN, or ASK to the other master), never on
--              one that would answer a key not moved yet as a missing one.
-- ARGV[1]      now_ms as a decimal, or "redis" to read Redis's own TIME
-- ARGV[2]      cost (0 only asks)
-- ARGV[3]      expiry margin in ms, added to every key's expiry
-- ARGV[4]      deadline: the latest Redis TIME, in microseconds, at which
--              the script may start (the caller gives up after it)
-- ARGV[1+4i..4+4i] for limit i: the policy's Redis code (the keys of
--              `policies`, one per descriptor in src/policies.rs), limit,
--              window_ms, shadow ("0"/"1")
-- ARGV[5+4n]   the call's receipt id, "<tag>:<seq>" (the store's tag, up to
--              16 hex digits, and the call's number in it): when the call
--              consumes, a receipt under this id is kept beside the
--              last-seen key (see decide.lua), which claim.lua finds
--              should the reply never reach the store; a call of cost > 0
--              whose receipt is stored has run already, and is answered
--              from it without consuming again (decide.lua)
-- ARGV[6+4n]   the watermark: no call of the store for this client
--              numbered below it is still open (its receipts below it are
--              dropped; the store's lowest open number among its calls of
--              clients of the same group of slots: src/receipts.rs)
--
-- Returns { redis_time_us, now_used, allowed, then per limit: allowed,
-- remaining, retry_after_ms (-1: never), reset_after_ms }, then, when the
-- call consumed (allowed, cost > 0), two numbers per limit for refund.lua
-- (decide.lua), where
-- redis_time_us is Redis's TIME when the script started; or, when the script
-- started after its deadline, { redis_time_us, -1 } having written nothing.
-- Anything wrong raises "TOLLGATE ..." before the first write (see
-- decide.lua's phases).

local keys = {}
for k = 1, #KEYS - 1 do
  keys[k] = KEYS[k]
end
return decide_call(keys, ARGV, KEYS[#KEYS])
