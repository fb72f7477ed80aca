-- wrk script: GET /v1/auth (forward auth) for clients c0..c9999 in turn.
wrk.method = "GET"
wrk.path = "/v1/auth"

local counter = 0

request = function()
  counter = counter + 1
  return wrk.format(nil, nil, { ["X-Client-Id"] = "c" .. (counter % 10000) }, nil)
end
