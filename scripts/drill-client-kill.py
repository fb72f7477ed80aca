#!/usr/bin/env python3
"""A fault drill, by hand: `tollgate serve` (fail-closed, one sliding-window
limit of 1,000,000 per hour, so that the store allows every request it
decides) on a private redis-server, 16 threads of requests for one client,
while every normal connection to Redis is killed every 10 ms (CLIENT KILL
TYPE normal): replies are lost between the run of a script and the write of
its reply. Once the kills stop and the store has settled, the uses Redis
counted for the client must equal the requests the store allowed; the
script prints both, and the store's refund counters from /metrics.

    scripts/drill-client-kill.py BINARY [SECONDS]     # env SETTLE=8 (s)

With CLUSTER=1 the same on a private three-master Redis Cluster, whose
every node has its normal connections killed (redis-rs's cluster client
then sends a command whose connection dropped again on a new one).

With PAUSE_MS=N every Redis process is also stopped (SIGSTOP) for N ms
every 100 ms: replies held past the 100 ms timeout come late and are
refunded, and the kills then drop refunds as well as decisions.

With RESTART_AT=S (one node only) Redis keeps an append-only file written
on every command, and is killed (SIGKILL) S seconds into the load and
started again 300 ms later from that file: calls and refunds in flight
then meet a Redis that is gone, and then one that is back.
"""
import http.client, json, os, signal, socket, subprocess, sys, tempfile, threading, time

from drills import counted_by_redis, one_client_config, start_redis, start_serve

BIN = sys.argv[1]
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 4.0

work = tempfile.mkdtemp()
RESTART_AT = float(os.environ.get("RESTART_AT", "0"))
persistent = ["--appendonly", "yes", "--appendfsync", "always"] if RESTART_AT else []
rports, redises, store = start_redis(work, cluster=os.environ.get("CLUSTER") == "1", extra=persistent)
serve, hport = start_serve(BIN, work, one_client_config(store, "breaker_failures = 0"))

stop = time.time() + SECONDS
counts = {"store_allowed": 0, "other": 0}
lock = threading.Lock()
def load():
    c = http.client.HTTPConnection("127.0.0.1", hport, timeout=5)
    mine = {"store_allowed": 0, "other": 0}
    while time.time() < stop:
        c.request("POST", "/v1/check", body='{"client":"drill"}', headers={"Content-Type": "application/json"})
        r = c.getresponse(); d = json.loads(r.read())
        if d.get("allowed") and d.get("decided_by") == "store":
            mine["store_allowed"] += 1
        else:
            mine["other"] += 1
    with lock:
        for k in mine: counts[k] += mine[k]

def killer():
    kills = 0
    nodes = None
    while time.time() < stop:
        try:
            nodes = nodes or [socket.create_connection(("127.0.0.1", p)) for p in rports]
            for s in nodes:
                s.sendall(b"CLIENT KILL TYPE normal SKIPME yes\r\n")
                if not s.recv(100):
                    raise OSError("closed")
                kills += 1
        except OSError:
            nodes = None  # Redis restarting: connect again
        time.sleep(0.01)
    counts["kills"] = kills

def restarter():
    time.sleep(RESTART_AT)
    old = redises[0]
    old.kill()
    old.wait()
    time.sleep(0.3)
    redises[0] = subprocess.Popen(old.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counts["restarted"] = 1

def pauser(pause):
    pauses = 0
    while time.time() < stop:
        for redis in redises:
            redis.send_signal(signal.SIGSTOP)
        time.sleep(pause)
        for redis in redises:
            redis.send_signal(signal.SIGCONT)
        pauses += 1
        time.sleep(0.1)
    counts["pauses"] = pauses

PAUSE_MS = float(os.environ.get("PAUSE_MS", "0"))
threads = [threading.Thread(target=load) for _ in range(16)] + [threading.Thread(target=killer)]
if PAUSE_MS > 0:
    threads.append(threading.Thread(target=pauser, args=(PAUSE_MS / 1000,)))
if RESTART_AT > 0:
    threads.append(threading.Thread(target=restarter))
for t in threads: t.start()
for t in threads: t.join()
time.sleep(float(os.environ.get("SETTLE", "8")))  # claims and refunds
counted = counted_by_redis(hport, "drill")
c = http.client.HTTPConnection("127.0.0.1", hport, timeout=5)
c.request("GET", "/metrics"); m = c.getresponse().read().decode()
lines = [l for l in m.splitlines() if l.startswith(("tollgate_store_refunds_total", "tollgate_store_replies_lost_total", "tollgate_store_errors_total"))]
serve.terminate()
serve.wait()
for redis in redises:
    redis.terminate()
    redis.wait()
if counted is None:
    sys.exit(1)
print(f"{BIN}: allowed by the store {counts['store_allowed']}, other answers {counts['other']}, kills {counts.get('kills')}, pauses {counts.get('pauses', 0)}, restarted {counts.get('restarted', 0)}, counted in Redis {counted}, over by {counted - counts['store_allowed']}")
for l in lines: print("   ", l)
