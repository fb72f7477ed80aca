-- wrk script: GET /healthz built by a request() function, as check.lua and
-- auth.lua build theirs, so that wrk spends the same work per request on
-- every endpoint (without request() wrk sends one prebuilt request, which
-- costs it less and leaves the server more of the two cores).
wrk.method = "GET"
wrk.path = "/healthz"

local counter = 0

request = function()
  counter = counter + 1
  return wrk.format(nil, nil, { ["X-Client-Id"] = "c" .. (counter % 10000) }, nil)
end
