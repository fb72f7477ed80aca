-- wrk script: GET / with an X-Client-Id header of c0..c9999 in turn (per wrk
-- thread), for a proxy keyed by that header (`--key header:X-Client-Id`), so
-- that decisions spread over many clients.
local counter = 0
request = function()
  counter = counter + 1
  return wrk.format("GET", "/", { ["X-Client-Id"] = "c" .. (counter % 10000) })
end
