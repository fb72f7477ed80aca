-- wrk script: the same POST /v1/check body every time (one client, so most
-- answers are rejections: decisions all the same). Without a request()
-- function wrk sends one prebuilt request, the cheapest load to generate.
wrk.method = "POST"
wrk.path = "/v1/check"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"client":"gateway","cost":1}'
