#!/usr/bin/env python3
"""A fault drill, by hand: what an unplanned failover loses. `tollgate serve`
(fail-closed, one sliding-window limit of 1,000,000 per hour, so that the
store allows every request it decides) on a private Redis Cluster of three
masters with one replica each (`cluster-node-timeout` 1000 ms), 16 threads
of requests for one client, and the master that holds that client's slot
killed (SIGKILL) after KILL_AT seconds (default 2): its replica takes over
about a second later. Once the load stops and the store has settled, the
uses Redis counted for the client (on the promoted replica) are compared
with the requests the store allowed; "lost" is what the dead master had
allowed that its replica never received (allowed again afterwards: over-
admission), from Redis's asynchronous replication.

    scripts/drill-failover.py BINARY [SECONDS]     # default 5 s

With REPLICA_STALL_MS=N the victim's replicas are stopped (SIGSTOP) N ms
before the kill and go on (SIGCONT) right after it: what the master
allowed meanwhile never reached them, as over a slow link.

With MIN_REPLICAS_LAG=N every master runs with `min-replicas-to-write 1`
and `min-replicas-max-lag N`, and has two replicas, so that the one
promoted still has a replica and takes writes.

With REPLICAS_TO_ACK=N, `[store] replicas_to_ack = N`: a decision is
answered as allowed only once N replicas acknowledged it (Redis's WAIT),
so what the dead master allowed, its replica holds. Give it with
MIN_REPLICAS_LAG (two replicas each): with one, the promoted replica has
none left to acknowledge, every decision after the failover is answered
by the failure policy, and the drill stops with "the store did not answer".
"""
import http.client, json, os, re, signal, sys, tempfile, threading, time

from drills import cli, counted_by_redis, one_client_config, start_redis, start_serve

BIN = sys.argv[1]
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
KILL_AT = float(os.environ.get("KILL_AT", "2"))
CLIENT = "drill"

work = tempfile.mkdtemp()
extra = ["--cluster-node-timeout", "1000"]
lag = os.environ.get("MIN_REPLICAS_LAG")
if lag:
    extra += ["--min-replicas-to-write", "1", "--min-replicas-max-lag", lag]
rports, redises, store = start_redis(work, cluster=True, extra=extra, replicas=2 if lag else 1)
acks = os.environ.get("REPLICAS_TO_ACK")
serve, hport = start_serve(BIN, work, one_client_config(
    store, f"replicas_to_ack = {acks}" if acks else ""))


def port_of_master(slot):
    """The port of the master serving `slot`, by CLUSTER NODES."""
    for line in cli(rports[0], "CLUSTER", "NODES").splitlines():
        fields = line.split()
        if "master" not in fields[2]:
            continue
        for served in fields[8:]:
            first, _, last = served.partition("-")
            if not served.startswith("[") and int(first) <= slot <= int(last or first):
                return int(fields[1].split("@")[0].rsplit(":", 1)[1])
    sys.exit(f"no master serves slot {slot}")


# The master that holds the client's slot (its keys share the tag {c:drill}).
slot = int(cli(rports[0], "CLUSTER", "KEYSLOT", "{c:" + CLIENT + "}"))
victim = rports.index(port_of_master(slot))
replicas = [rports.index(int(port)) for port in
            re.findall(r"slave\d+:ip=[^,]+,port=(\d+)", cli(rports[victim], "INFO", "replication"))]
STALL = float(os.environ.get("REPLICA_STALL_MS", "0")) / 1000
print(f"client {CLIENT!r}: slot {slot}, master on port {rports[victim]}, "
      f"replicas on {[rports[r] for r in replicas]}")

start = time.time()
stop = start + SECONDS
counts = {"store_allowed": 0, "other": 0}
# Per tenth of a second: answers the store decided, and the others.
tenths = int(SECONDS * 10) + 1
timeline = [[0, 0] for _ in range(tenths)]
lock = threading.Lock()


def load():
    c = http.client.HTTPConnection("127.0.0.1", hport, timeout=5)
    mine = {"store_allowed": 0, "other": 0}
    while time.time() < stop:
        c.request("POST", "/v1/check", body=json.dumps({"client": CLIENT}),
                  headers={"Content-Type": "application/json"})
        d = json.loads(c.getresponse().read())
        key = "store_allowed" if d.get("allowed") and d.get("decided_by") == "store" else "other"
        mine[key] += 1
        with lock:
            timeline[min(int((time.time() - start) * 10), tenths - 1)][key == "other"] += 1
    with lock:
        for k in mine:
            counts[k] += mine[k]


threads = [threading.Thread(target=load) for _ in range(16)]
for t in threads: t.start()
time.sleep(KILL_AT - STALL)
if STALL:
    for r in replicas: redises[r].send_signal(signal.SIGSTOP)
    time.sleep(STALL)
redises[victim].kill()
for r in replicas: redises[r].send_signal(signal.SIGCONT)
for t in threads: t.join()
time.sleep(float(os.environ.get("SETTLE", "3")))
counted = counted_by_redis(hport, CLIENT)
serve.terminate(); serve.wait()
for r in redises:
    r.kill(); r.wait()
if counted is None:
    sys.exit(1)
# The failure policy's stretch: from the first tenth after the kill with no
# store answer to the first tenth the store answers every request again.
after = [i for i in range(int(KILL_AT * 10), tenths) if timeline[i][1]]
if after:
    print(f"failure policy from {after[0] / 10:.1f} s to {(after[-1] + 1) / 10:.1f} s "
          f"(kill at {KILL_AT:.1f} s)")
print(f"{BIN}: allowed by the store {counts['store_allowed']}, other answers {counts['other']}, "
      f"counted in Redis {counted}, lost {counts['store_allowed'] - counted}")
