-- wrk script: POST /v1/check for clients c0..c9999 in turn (per wrk thread),
-- so that decisions spread over many clients and shards.
wrk.method = "POST"
wrk.path = "/v1/check"
wrk.headers["Content-Type"] = "application/json"

local counter = 0

request = function()
  counter = counter + 1
  return wrk.format(nil, nil, nil, '{"client":"c' .. (counter % 10000) .. '","cost":1}')
end
