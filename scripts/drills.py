"""What the fault drills share (drill-client-kill.py, drill-master-down.py,
drill-failover.py, drill-reshard.py): private redis-server processes on free
loopback ports, one node or a three-master cluster (with replicas if asked),
and `tollgate serve` started on them and waited for; for the drills that
hammer one client, its config and the uses Redis counted for it afterwards;
for the drills that spread requests over many clients, the load and its
answers counted per second. Never the shared Redis on 6379."""
import http.client, json, os, random, socket, subprocess, sys, threading, time


def free_port():
    # Below 55536: a cluster node's bus listens on its port + 10000.
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
        if port < 55536:
            return port


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True).stdout


def start_redis(work, cluster, extra=(), replicas=0):
    """One redis-server, or three masters joined into a cluster (each with
    `replicas` replicas), in `work`, without persistence; waits (bounded)
    until they answer, and the cluster is ok. Returns their ports, their
    processes and the `[store]` line that reaches them."""
    ports = [free_port() for _ in range(3 * (1 + replicas) if cluster else 1)]
    processes = []
    for i, port in enumerate(ports):
        args = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", work, *extra]
        if cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{i}.conf"]
        processes.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for port in ports:
        for _ in range(100):
            if cli(port, "PING").strip() == "PONG":
                break
            time.sleep(0.05)
    if not cluster:
        return ports, processes, f'url = "redis://127.0.0.1:{ports[0]}"'
    subprocess.run(["redis-cli", "-p", str(ports[0]), "--cluster", "create"]
                   + [f"127.0.0.1:{p}" for p in ports]
                   + ["--cluster-replicas", str(replicas), "--cluster-yes"],
                   stdout=subprocess.DEVNULL, check=True)
    for _ in range(100):
        synced = [p for p in ports if "master_link_status:up" in cli(p, "INFO", "replication")]
        if all("cluster_state:ok" in cli(p, "CLUSTER", "INFO") for p in ports) and \
                len(synced) == 3 * replicas:
            break
        time.sleep(0.1)
    seeds = ", ".join(f'"redis://127.0.0.1:{p}"' for p in ports)
    return ports, processes, f"cluster = [{seeds}]"


def start_serve(binary, work, config):
    """`binary serve` with `config` (the text after its `listen` line) on a
    free port; waits (bounded) for /healthz. Returns the process and the
    port. serve's log goes to $SERVE_LOG when set."""
    port = free_port()
    path = os.path.join(work, "c.toml")
    open(path, "w").write(f'listen = ["127.0.0.1:{port}"]\n{config}')
    log = open(os.environ.get("SERVE_LOG", os.devnull), "w")
    serve = subprocess.Popen([binary, "serve", "--config", path], stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz"); c.getresponse().read(); break
        except OSError:
            time.sleep(0.05)
    return serve, port


# One client hammered under a limit no drill reaches, so that the store
# allows every request it decides: what Redis counts must equal those.
ONE_CLIENT_LIMIT = 1_000_000


def one_client_config(store, extra=""):
    """serve's config for the one-client drills: one sliding-window limit of
    ONE_CLIENT_LIMIT per hour on `store`, fail-closed, a 100 ms timeout,
    `extra` lines added to `[store]`, gRPC off."""
    return f"""[[plans.default]]
name = "1h"
policy = "sliding-window"
limit = {ONE_CLIENT_LIMIT}
window = "1h"
[store]
{store}
failure_policy = "fail-closed"
timeout = "100ms"
{extra}
[envoy]
grpc_listen = "off"
"""


def counted_by_redis(port, client):
    """The uses Redis counts for `client`, asked of serve on `port` until
    the store answers (bounded: 10 s); None when it never does (said on
    stderr), so that the caller still stops what it started."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    for _ in range(100):
        c.request("GET", f"/v1/remaining/{client}")
        d = json.loads(c.getresponse().read())
        # The first call after a fault may still meet a dropped connection.
        if d.get("decided_by") == "store":
            return ONE_CLIENT_LIMIT - d["limits"][0]["remaining"]
        time.sleep(0.1)
    print(f"the store did not answer after the drill: {d}", file=sys.stderr)
    return None


class SpreadLoad:
    """Threads of `POST /v1/check` to serve on `port` for `seconds` s, each
    request for the client `pick(rng)` returns (an int: client `c<n>`, n
    below `clients`). Counts, per second since the start, the answers the
    store decided (`decided_by` in `decided`) and those the failure policy
    gave, and per client the store's allowed answers."""

    def __init__(self, port, seconds, clients, pick, decided=("store",)):
        self.port, self.pick, self.decided = port, pick, decided
        self.start = time.time()
        self.stop = self.start + seconds
        self.seconds = int(seconds) + 1
        self.store = [0] * self.seconds
        self.failure = [0] * self.seconds
        self.allowed = [0] * clients
        self.lock = threading.Lock()

    def run(self, threads, during):
        """Runs `threads` load threads while `during()` runs here, and
        returns once all have ended (at the load's end)."""
        loads = [threading.Thread(target=self._load, args=(i,)) for i in range(threads)]
        for t in loads: t.start()
        during()
        for t in loads: t.join()

    def _load(self, seed):
        rng = random.Random(seed)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        store, failure, allowed = [0] * self.seconds, [0] * self.seconds, [0] * len(self.allowed)
        while time.time() < self.stop:
            client = self.pick(rng)
            c.request("POST", "/v1/check", body=json.dumps({"client": f"c{client}"}),
                      headers={"Content-Type": "application/json"})
            d = json.loads(c.getresponse().read())
            second = min(int(time.time() - self.start), self.seconds - 1)
            if d.get("decided_by") in self.decided:
                store[second] += 1
                allowed[client] += 1 if d.get("allowed") else 0
            else:
                failure[second] += 1
        with self.lock:
            for i in range(self.seconds):
                self.store[i] += store[i]; self.failure[i] += failure[i]
            for i, n in enumerate(allowed):
                self.allowed[i] += n
