-- wrk script: every request from a client id never seen before (start time,
-- thread number and counter, so that runs do not repeat each other's ids),
-- to fill the store past its cap.
wrk.method = "POST"
wrk.path = "/v1/check"
wrk.headers["Content-Type"] = "application/json"

local threads = 0
setup = function(thread)
  thread:set("id", os.time() .. "-" .. threads)
  threads = threads + 1
end

local counter = 0

request = function()
  counter = counter + 1
  return wrk.format(nil, nil, nil, '{"client":"t' .. id .. '-' .. counter .. '","cost":1}')
end
