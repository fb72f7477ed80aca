#!/usr/bin/env python3
"""Sends a fixed number of requests to `tollgate serve` over one keep-alive
connection, one at a time, and checks every answer is a 2xx or a 429:

    python3 scripts/bench/hammer.py 127.0.0.1:18181 check 20000
    python3 scripts/bench/hammer.py 127.0.0.1:18181 auth 20000
    python3 scripts/bench/hammer.py 127.0.0.1:18181 healthz 20000

`check` is `POST /v1/check` and `auth` is `GET /v1/auth` (`X-Client-Id`) for
clients c0..c9999 in turn, as scripts/bench/check.lua does. A fixed count
(not a duration) is what instruction counts per request need: run the server
under `valgrind --tool=callgrind` and divide its instructions by the count.
"""
import http.client
import sys

address, kind, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
host, port = address.rsplit(":", 1)
connection = http.client.HTTPConnection(host, int(port), timeout=60)
for i in range(count):
    client = f"c{i % 10000}"
    if kind == "check":
        body = f'{{"client":"{client}","cost":1}}'
        connection.request("POST", "/v1/check", body, {"Content-Type": "application/json"})
    elif kind == "auth":
        connection.request("GET", "/v1/auth", headers={"X-Client-Id": client})
    elif kind == "healthz":
        connection.request("GET", "/healthz")
    else:
        sys.exit(f"unknown kind {kind!r}: check, auth or healthz")
    response = connection.getresponse()
    response.read()
    if not (200 <= response.status < 300 or response.status == 429):
        sys.exit(f"request {i}: HTTP {response.status}")
connection.close()
