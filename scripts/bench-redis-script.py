#!/usr/bin/env python3
"""Redis's own cost per decision of the plan and batch scripts, without serve.

Spawns a private redis-server on a free port (never the shared one), loads
the scripts composed from one or more script directories (e.g. a checkout's
crates/tollgate-redis/src/scripts before and after a change), and drives
each with the same decisions: the caller's times, so every run sees the same
inputs. Prints, per script directory and workload, Redis's CPU (INFO cpu,
user + sys) and EVALSHA time (INFO commandstats) per decision, the commands
the script ran per decision (commandstats calls), and a digest of the
replies (without Redis's TIME) and of the stored state, which must be equal
across directories: the answers and the keys are the same.

  scripts/bench-redis-script.py [--rounds R] [--batch B] [--workload W] [--cluster] [--callgrind] DIR [DIR ...]

--callgrind runs each directory on its own redis-server under valgrind
(callgrind, collecting inside evalShaCommand only): instructions per
decision, which the machine's load does not move. --alternate also runs the
directories' scripts in turn on one store (old and new reading each other's
keys): its digests must equal the others'.

Workloads: spread (10,000 clients, ~10 calls each, 20 decisions per ms),
hammer (one client, 1 decision per ms, past its limit), hammer-ms (one
client, 20 decisions per ms). Sliding window, limit 100, window 1 h, expiry
margin 60 s, unless --policy/--limit/--window say otherwise.
"""

import argparse
import contextlib
import hashlib
import os
import random
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time


def compose(directory, driver):
    """The script as src/policies.rs composes it, from one scripts directory."""
    read = lambda *p: open(os.path.join(directory, *p)).read()
    text = read("common.lua")
    for name in sorted(os.listdir(os.path.join(directory, "policies"))):
        if not name.endswith(".lua"):
            continue
        lua = read("policies", name)
        code = lua.split("\n", 1)[0].split("code=")[1].split()[0]
        text += "policies['%s'] = (function()\n%send)()\n" % (code, lua)
    return text + read("decide.lua") + read(driver)


class Redis:
    """A minimal RESP client: pipelined commands, replies parsed."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    @staticmethod
    def encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(1 << 20)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            try:
                return data.decode()
            except UnicodeDecodeError:
                return data  # batch.lua's packed answers
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ValueError(line)

    def pipeline(self, commands):
        self.sock.sendall(b"".join(self.encode(c) for c in commands))
        return [self._reply() for _ in commands]

    def call(self, *args):
        reply = self.pipeline([args])[0]
        if isinstance(reply, RuntimeError):
            raise reply
        return reply


def info(r, section):
    fields = {}
    for line in r.call("INFO", section).splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            fields[k] = v
    return fields


def decisions(args):
    """The workload: (client, now_ms) per decision, the same for every run."""
    rng = random.Random(11)
    t0 = 1_700_000_000_000
    if args.workload == "spread":
        return [("c%d" % rng.randrange(args.clients), t0 + i // 20) for i in range(args.decisions)]
    per_ms = 1 if args.workload == "hammer" else 20
    return [("cHAMMER", t0 + i // per_ms) for i in range(args.decisions)]


def one_call(client, now, args, seq):
    """One call's KEYS and ARGV; `seq` (None for scripts older than the
    receipts) numbers the call, whose receipt id and watermark end the ARGV
    (every earlier call answered, as on a store whose replies all came)."""
    base = "tollgate:{c:%s}" % client
    suffix = ":v2" if args.policy == "s" else ""
    keys = [base + ":seen", base + ":00000000000000aa" + suffix]
    argv = [now, 1, 60_000, 9_000_000_000_000_000, args.policy, args.limit, args.window, 0]
    if seq is not None:
        argv += ["0123456789abcdef:%d" % seq, seq]
    return keys, argv


def takes_receipts(directory):
    """Whether the scripts of `directory` take a receipt id per call."""
    with open(os.path.join(directory, "decide.lua")) as f:
        return "watermark" in f.read()


def layout(directory):
    """What the scripts of `directory` take besides the calls: whether
    plan.lua declares the receipts key last, and whether batch.lua's ARGV[1]
    says it runs on a cluster."""
    read = lambda name: open(os.path.join(directory, name)).read()
    return {"receipts_declared": "KEYS[2 + n]" in read("plan.lua"),
            "cluster_flag": "on_cluster" in read("batch.lua")}


def commands(sha_plan, sha_batch, args, receipts, shape):
    calls = [one_call(c, t, args, i + 1 if receipts else None)
             for i, (c, t) in enumerate(decisions(args))]
    if args.batch <= 1:
        declared = lambda k: k + [k[0][:-len("seen")] + "receipts"] if shape["receipts_declared"] else k
        return [["EVALSHA", sha_plan, len(declared(k))] + declared(k) + a for k, a in calls], len(calls)
    out = []
    for j in range(0, len(calls), args.batch):
        group = calls[j:j + args.batch]
        # batch.lua: one key (the first call's, for routing); each call's
        # keys travel in ARGV with its arguments.
        argv = [1 if args.cluster else 0] if shape["cluster_flag"] else []
        argv += [len(group)]
        for ks, a in group:
            argv += [len(ks) - 1] + ks + a
        out.append(["EVALSHA", sha_batch, 1, group[0][0][0]] + argv)
    return out, len(calls)


def state_digest(r):
    h = hashlib.sha256()
    keys = sorted(r.call("KEYS", "*"))
    for k in keys:
        kind = r.call("TYPE", k)
        value = r.call("LRANGE", k, 0, -1) if kind == "list" else r.call("GET", k)
        ttl = r.call("PTTL", k)
        if ttl <= 0:
            sys.exit("key %s has no expiry (%s)" % (k, ttl))
        h.update(repr((k, value)).encode())
    return h.hexdigest()[:12], len(keys)


def run(r, directory, args):
    """One run; `directory` may be a list of directories whose scripts then
    take the calls in turn (each reads what the other wrote)."""
    dirs = directory if isinstance(directory, list) else [directory]
    runs = []
    for d in dirs:
        sha_plan = r.call("SCRIPT", "LOAD", compose(d, "plan.lua"))
        sha_batch = r.call("SCRIPT", "LOAD", compose(d, "batch.lua"))
        runs.append(commands(sha_plan, sha_batch, args, takes_receipts(d), layout(d)))
    n = runs[0][1]
    cmds = [runs[j % len(runs)][0][j] for j in range(len(runs[0][0]))]
    r.call("FLUSHALL")
    memory0 = int(info(r, "memory")["used_memory"])
    r.call("CONFIG", "RESETSTAT")
    cpu0 = info(r, "cpu")
    digest = hashlib.sha256()
    for j in range(0, len(cmds), args.pipeline):
        for reply in r.pipeline(cmds[j:j + args.pipeline]):
            if isinstance(reply, RuntimeError):
                sys.exit("%s: %s" % (directory, reply))
            if args.batch > 1:
                replies = batch_answers(reply)
            elif isinstance(reply, list):
                replies = [reply]
            else:
                continue
            for one in replies:
                digest.update(repr(one[1:]).encode())
    cpu1 = info(r, "cpu")
    memory1 = int(info(r, "memory")["used_memory"])
    stats = info(r, "commandstats")
    cpu = sum(float(cpu1[k]) - float(cpu0[k]) for k in ("used_cpu_user", "used_cpu_sys"))
    per = {}
    for k, v in stats.items():
        name = k[len("cmdstat_"):]
        f = dict(kv.split("=") for kv in v.split(","))
        per[name] = (int(f["calls"]), float(f["usec"]))
    inner = sum(c for name, (c, _) in per.items() if name not in ("evalsha", "info", "config|resetstat"))
    return {
        "cpu_us": cpu * 1e6 / n,
        "evalsha_us": per["evalsha"][1] / n,
        "cmds": inner / n,
        "per_cmd": {name: c / n for name, (c, _) in per.items()
                    if name not in ("evalsha", "info", "config|resetstat")},
        "replies": digest.hexdigest()[:12],
        "state": state_digest(r),
        "bytes_per_client": (memory1 - memory0) / len({c for c, _ in decisions(args)}),
    }


def batch_answers(reply):
    """batch.lua's reply as a list of each call's answer: its numbers, or
    its error's text. Since the batch's answers come in one string (a kind
    byte, a count, then 8-byte numbers or text, little-endian), decoded
    here; before, an array of them."""
    if isinstance(reply, list):
        return reply
    data = reply if isinstance(reply, bytes) else reply.encode()
    answers, at = [], 0
    while at < len(data):
        kind, count = struct.unpack_from("<BI", data, at)
        at += 5
        if kind == 0:
            answers.append(list(struct.unpack_from("<%dq" % count, data, at)))
            at += 8 * count
        else:
            answers.append(data[at:at + count].decode())
            at += count
    return answers


def free_port():
    # Below 55536: a cluster node's bus listens on its port + 10000.
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 55536:
            return port


def workload_arguments(p, policy="s", decisions=100_000, clients=10_000, batch=1):
    """The script directories and the workload's options, which
    profile-lua.py takes too (with its own defaults)."""
    p.add_argument("dirs", nargs="+")
    p.add_argument("--workload", default="spread", choices=["spread", "hammer", "hammer-ms"])
    p.add_argument("--policy", default=policy, choices=["s", "t", "g"])
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--window", type=int, default=3_600_000)
    p.add_argument("--decisions", type=int, default=decisions)
    p.add_argument("--clients", type=int, default=clients, help="the spread workload's clients")
    p.add_argument("--batch", type=int, default=batch, help="decisions per EVALSHA (batch.lua when > 1)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    workload_arguments(p)
    p.add_argument("--pipeline", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--alternate", action="store_true",
                   help="also run the directories' scripts in turn, call by call, on one store")
    p.add_argument("--cluster", action="store_true",
                   help="run redis-server as a one-node Redis Cluster holding every slot "
                        "(batch.lua then checks each call's keys: its ARGV[1])")
    p.add_argument("--callgrind", action="store_true",
                   help="count Redis's instructions inside EVALSHA under valgrind (one round)")
    args = p.parse_args()

    print("load average: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    print("workload=%s policy=%s limit=%d window=%d decisions=%d clients=%d batch=%d" % (
        args.workload, args.policy, args.limit, args.window, args.decisions, args.clients, args.batch))
    results = {d: [] for d in args.dirs}
    if args.callgrind:
        # One server under callgrind per directory, counting instructions
        # inside EVALSHA only (the script's run, not the network).
        for d in args.dirs:
            out = "/tmp/bench-redis-script.%d.callgrind" % os.getpid()
            with server(["valgrind", "--tool=callgrind", "--toggle-collect=evalShaCommand",
                         "--callgrind-out-file=" + out], args.cluster) as r:
                results[d].append(run(r, d, args))
            ir = [l for l in open(out) if l.startswith("summary:") or l.startswith("totals:")]
            if not os.environ.get("KEEP_CALLGRIND"):
                os.unlink(out)
            results[d][-1]["ir"] = int(ir[-1].split()[1]) / args.decisions
    else:
        with server([], args.cluster) as r:
            for _ in range(args.rounds):
                for d in args.dirs:
                    results[d].append(run(r, d, args))
    if args.alternate:
        with server([], args.cluster) as r:
            mixed = run(r, list(args.dirs), args)
        print("the directories in turn, call by call: replies %s, state %s (%d keys)" % (
            mixed["replies"], mixed["state"][0], mixed["state"][1]))
    for d in args.dirs:
        rs = results[d]
        cpu = [x["cpu_us"] for x in rs]
        ev = [x["evalsha_us"] for x in rs]
        last = rs[-1]
        ir = " %.0f instructions/decision in EVALSHA," % last["ir"] if "ir" in last else ""
        print("%s:%s Redis CPU %.2f us/decision (median of %d: %s), EVALSHA %.2f us/decision, "
              "%.2f commands/decision %s, replies %s, state %s (%d keys), %.0f bytes/client" % (
                  d, ir, statistics.median(cpu), len(cpu), " ".join("%.2f" % c for c in cpu),
                  statistics.median(ev), last["cmds"],
                  " ".join("%s=%.2f" % kv for kv in sorted(last["per_cmd"].items())),
                  last["replies"], last["state"][0], last["state"][1],
                  last["bytes_per_client"]))
    print("load average: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))


@contextlib.contextmanager
def server(prefix, cluster=False):
    """A private redis-server on a free port (under `prefix`, e.g. valgrind);
    with `cluster`, a one-node Redis Cluster that holds every slot."""
    port = free_port()
    work = tempfile.mkdtemp(prefix="bench-redis-script.")
    extra = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"] if cluster else []
    process = subprocess.Popen(prefix + ["redis-server", "--port", str(port), "--save", "",
                                         "--appendonly", "no", "--dir", work] + extra,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                r = Redis(port)
                r.call("PING")
                break
            except (ConnectionError, OSError, RuntimeError):
                time.sleep(0.05)
        if cluster:
            r.call("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            for _ in range(600):
                if "cluster_state:ok" in r.call("CLUSTER", "INFO"):
                    break
                time.sleep(0.05)
        yield r
    finally:
        process.terminate()
        process.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
