#!/usr/bin/env python3
"""Writes a replay session of N calls (default 1,000,000) to stdout, for timing
`tollgate replay`. Deterministic (fixed seed), so runs are comparable:

    python3 scripts/gen-replay.py 1000000 > /tmp/million.replay
    hyperfine 'target/release/tollgate replay /tmp/million.replay > /dev/null'

Mix: 80% allow, 20% remaining, 10,000 clients, time moving 1 ms every 10 calls,
policy token-bucket 100 per 60 s (pass a policy name as the second argument).
"""
import random
import sys

calls = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
policy = sys.argv[2] if len(sys.argv) > 2 else "token-bucket"
rng = random.Random(2)
out = sys.stdout
out.write(f"new {policy} 100 60000\n")
clients = [f"client-{i}" for i in range(10_000)]
lines = []
now = 1_700_000_000_000
for i in range(calls):
    if i % 10 == 0:
        now += 1
    verb = "allow" if rng.random() < 0.8 else "remaining"
    lines.append(f"{verb} {clients[rng.randrange(len(clients))]} {now}\n")
    if len(lines) == 10_000:
        out.write("".join(lines))
        lines.clear()
out.write("".join(lines))
