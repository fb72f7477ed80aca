#!/usr/bin/env python3
"""A fault drill, by hand: `tollgate serve` (fail-closed, timeout 100 ms) on
a private three-master Redis Cluster, 8 threads of requests spread over
CLIENTS clients, each allowed LIMIT per hour (less than the drill asks, so
that every client reaches its limit), and after 2 s `redis-cli --cluster
reshard` moving SLOTS slots from the first master to the second, then back,
PIPELINE keys per MIGRATE (redis-cli's default 10; 2 leaves most clients'
three keys split between the masters for a moment). Prints, per second, the answers the
store decided (or its rejection cache) and those the failure policy gave, whether each resharding
succeeded, and the most any client was allowed: a resharding must cost a
moving slot's clients a few retries at most, and no client may ever be
allowed more than LIMIT.

    scripts/drill-reshard.py BINARY [SECONDS]     # default 14 s

SLOTS (default 1000), CLIENTS (default 2000), LIMIT (default 10), PIPELINE
(default 10). HOT=N sends half of the requests to N clients of the slots
that move (hot clients: the ones most likely to be decided while their
keys lie on both masters); at the end each hot client's use as the store
counts it must equal what its answers allowed (a decision made from half
of its keys would start it again from nothing). Give them a LIMIT they do
not reach (e.g. 1000000): a client at its limit is answered by the
rejection cache, without Redis.
"""
import http.client, json, os, subprocess, sys, tempfile, time

from drills import SpreadLoad, cli, start_redis, start_serve

BIN = sys.argv[1]
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 14.0
START_AT = 2.0
SLOTS = int(os.environ.get("SLOTS", "1000"))
CLIENTS = int(os.environ.get("CLIENTS", "2000"))
LIMIT = int(os.environ.get("LIMIT", "10"))
PIPELINE = os.environ.get("PIPELINE", "10")
HOT = int(os.environ.get("HOT", "0"))

work = tempfile.mkdtemp()
rports, redises, store = start_redis(work, cluster=True)
serve, hport = start_serve(BIN, work, f"""[[plans.default]]
name = "1h"
policy = "sliding-window"
limit = {LIMIT}
window = "1h"
[store]
{store}
failure_policy = "fail-closed"
timeout = "100ms"
[envoy]
grpc_listen = "off"
""")


def keyslot(client):
    return int(cli(rports[0], "CLUSTER", "KEYSLOT", "{c:%s}" % client).strip())


# Clients c0..c{CLIENTS-1}; the hot ones are among them, in the first SLOTS
# slots (the first master's lowest: those the resharding moves).
hot = [c for c in range(CLIENTS) if keyslot(f"c{c}") < SLOTS][:HOT] if HOT else []


def pick(rng):
    return rng.choice(hot) if hot and rng.random() < 0.5 else rng.randrange(CLIENTS)


# Answers of the rejection cache are the store's own.
load = SpreadLoad(hport, SECONDS, CLIENTS, pick, decided=("store", "cache"))


def node_id(port):
    return cli(port, "CLUSTER", "MYID").strip()


def epochs(port):
    """One node's view: the current epoch, and each master's id, config epoch and slots."""
    current = [l for l in cli(port, "CLUSTER", "INFO").splitlines() if l.startswith("cluster_current_epoch:")]
    masters = sorted(" ".join(f[:1] + f[6:7] + [s for s in f[8:] if not s.startswith("[")])
                     for f in (l.split() for l in cli(port, "CLUSTER", "NODES").splitlines())
                     if len(f) >= 8 and "master" in f[2])
    return current, masters


def agreed(port):
    """The nodes agree on the slots (redis-cli's check) and on the epochs: a
    resharding that starts before the last one's new epoch reached every node
    can leave a slot no master claims (crates/tollgate-redis's
    RedisCluster::epochs_agree)."""
    check = cli(port, "--cluster", "check", f"127.0.0.1:{port}")
    views = [epochs(p) for p in rports]
    return ("All nodes agree" in check and "[ERR]" not in check and "[WARNING]" not in check
            and all(v == views[0] for v in views))


def reshard(source, target):
    """SLOTS slots from `source` to `target` (ports); (seconds taken, ok)."""
    for _ in range(100):
        if agreed(source):
            break
        time.sleep(0.1)
    began = time.time()
    out = subprocess.run(["redis-cli", "-p", str(source), "--cluster", "reshard", f"127.0.0.1:{source}",
                          "--cluster-from", node_id(source), "--cluster-to", node_id(target),
                          "--cluster-slots", str(SLOTS), "--cluster-pipeline", PIPELINE,
                          "--cluster-yes"],
                         capture_output=True, text=True).stdout
    ok = "[ERR]" not in out and "Target key exists" not in out and "failed" not in out.lower()
    return time.time() - began, ok, out


moves = []


def move_and_back():
    time.sleep(START_AT)
    for source, target in [(rports[0], rports[1]), (rports[1], rports[0])]:
        if time.time() >= load.stop:
            break
        at = time.time() - load.start
        took, ok, out = reshard(source, target)
        moves.append((at, took, ok))
        if not ok:
            print(out[-1500:], file=sys.stderr)


load.run(8, move_and_back)
counted = {}
for client in hot:
    c = http.client.HTTPConnection("127.0.0.1", hport, timeout=5)
    c.request("GET", f"/v1/remaining/c{client}")
    d = json.loads(c.getresponse().read())
    if d.get("decided_by") == "store":
        counted[client] = LIMIT - d["limits"][0]["remaining"]
serve.terminate(); serve.wait()
for r in redises:
    r.kill(); r.wait()
print(f"{BIN}: {SLOTS} slots moved from master 0 to master 1 and back, {PIPELINE} keys per MIGRATE, "
      f"{CLIENTS} clients ({len(hot)} hot), limit {LIMIT}")
for at, took, ok in moves:
    print(f"  a resharding from {at:.1f} s, {took:.1f} s long: {'ok' if ok else 'FAILED'}")
print("second  store (or cache)  failure-policy")
for i in range(int(SECONDS)):
    print(f"{i:6d} {load.store[i]:17d} {load.failure[i]:15d}")
print(f"failure policy {sum(load.failure)} of {sum(load.failure) + sum(load.store)} answers; "
      f"the most any client was allowed: {max(load.allowed)} (limit {LIMIT}); "
      f"clients over the limit: {sum(1 for a in load.allowed if a > LIMIT)}")
for client in hot:
    print(f"  hot client c{client}: allowed {load.allowed[client]}, counted by the store "
          f"{counted.get(client, 'not answered')}"
          f"{'' if counted.get(client) == load.allowed[client] else '  <- NOT THE SAME'}")
