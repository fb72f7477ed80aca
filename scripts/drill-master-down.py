#!/usr/bin/env python3
"""A fault drill, by hand: `tollgate serve` (fail-closed, timeout 100 ms, the
circuit breaker as by default) on a private three-master Redis Cluster, 8
threads of requests spread over 2,000 clients, and the first master killed
(SIGKILL) after 2 s. Prints, per second, the answers the store decided and
those the failure policy gave, serve's CPU time, and at the end the store's
lost-reply and refund counters from /metrics: a master down must cost only
its own clients, not the others' throughput.

    scripts/drill-master-down.py BINARY [SECONDS]     # default 8 s

With BREAKER=off, no circuit breaker: every call for the dead master's
clients is sent, and fails.
"""
import http.client, os, sys, tempfile, threading, time

from drills import SpreadLoad, start_redis, start_serve

BIN = sys.argv[1]
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
KILL_AT = 2.0
CLIENTS = 2_000

work = tempfile.mkdtemp()
rports, redises, store = start_redis(
    work, cluster=True, extra=["--cluster-require-full-coverage", "no", "--cluster-node-timeout", "1000"])
serve, hport = start_serve(BIN, work, f"""[[plans.default]]
name = "1h"
policy = "sliding-window"
limit = 1000000
window = "1h"
[store]
{store}
failure_policy = "fail-closed"
timeout = "100ms"
{"breaker_failures = 0" if os.environ.get("BREAKER") == "off" else ""}
[envoy]
grpc_listen = "off"
""")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


load = SpreadLoad(hport, SECONDS, CLIENTS, lambda rng: rng.randrange(CLIENTS))
cpu = []
def sampler():
    while time.time() < load.stop:
        cpu.append(cpu_seconds(serve.pid)); time.sleep(1)


def kill_master():
    sampling = threading.Thread(target=sampler); sampling.start()
    time.sleep(KILL_AT)
    redises[0].kill()
    sampling.join()


load.run(8, kill_master)
c = http.client.HTTPConnection("127.0.0.1", hport, timeout=5)
c.request("GET", "/metrics"); m = c.getresponse().read().decode()
lines = [l for l in m.splitlines() if l.startswith(("tollgate_store_refunds_total", "tollgate_store_replies_lost_total"))]
serve.terminate(); serve.wait()
for r in redises:
    r.kill(); r.wait()
print(f"{BIN}: master 0 killed at {KILL_AT:.0f} s")
print("second  store  failure-policy  serve-cpu-s")
for i in range(int(SECONDS)):
    used = cpu[i + 1] - cpu[i] if i + 1 < len(cpu) else float("nan")
    print(f"{i:6d} {load.store[i]:6d} {load.failure[i]:15d} {used:12.2f}")
for l in lines: print("   ", l)
