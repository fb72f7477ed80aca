#!/usr/bin/env python3
"""Writes an access log of N lines (default 10,000,000) to stdout, for timing
`tollgate simulate`. Deterministic (fixed seed), so runs are comparable:

    python3 scripts/gen-access-log.py 10000000 combined > /tmp/access.log
    time target/release/tollgate simulate --config examples/simulate.toml /tmp/access.log

Formats: combined (default), json, csv. Mix: 50,000 client addresses, a
heavy-tailed choice among them (a few clients send most requests, as in real
traffic), time moving 1 s every 1,000 lines (1,000 requests per second).
Every 100,000th line is garbage, to exercise the malformed-line path.
"""
import random
import sys
import time

lines_wanted = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
fmt = sys.argv[2] if len(sys.argv) > 2 else "combined"
rng = random.Random(7)
clients = [f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}" for i in range(50_000)]
# Heavy tail: index = floor(50000 * u^4) puts most weight on the first few.
picks = [clients[int(len(clients) * rng.random() ** 4)] for _ in range(65_536)]
paths = ["/v1/items", "/v1/items/42", "/v1/search?q=x", "/healthz"]
start = 1_764_669_600  # 2025-12-02T10:00:00Z
out = sys.stdout
if fmt == "csv":
    out.write("time,client,method,path,status\n")
chunk = []
second_text = None
for i in range(lines_wanted):
    second = start + i // 1000
    ms = second * 1000 + (i % 1000)
    client = picks[(i * 2654435761) % 65_536]
    path = paths[i % 4]
    if i % 100_000 == 99_999:
        chunk.append("this line is not a request\n")
    elif fmt == "combined":
        if i % 1000 == 0 or second_text is None:
            second_text = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(second))
        chunk.append(
            f'{client} - - [{second_text}] "GET {path} HTTP/1.1" 200 512 "-" "bench/1.0"\n'
        )
    elif fmt == "json":
        chunk.append(
            f'{{"time":{ms},"client":"{client}","method":"GET","path":"{path}","status":200}}\n'
        )
    else:
        chunk.append(f"{ms},{client},GET,{path},200\n")
    if len(chunk) == 10_000:
        out.write("".join(chunk))
        chunk.clear()
out.write("".join(chunk))
