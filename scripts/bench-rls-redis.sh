#!/usr/bin/env bash
# Envoy RLS on Redis: calls that name one client, and calls that name two
# (an address and an API key, as crates/tollgate-envoy/examples/envoy.yaml
# sends them), decided together all or nothing (BENCHMARKS.md, "Envoy
# requests of two clients on Redis"). A private redis-server on a free port,
# `tollgate serve` on it (the binaries of BINS, in turn, for a before/after),
# and rls_load at CONCURRENCY calls in flight. Prints, per binary and round,
# mode, calls/s, p50, p99 and Redis's calls per decision (INFO commandstats),
# then the load average. Loopback only; every process is stopped by its PID.
# Builds first, then measures under flock /tmp/tollgate-bench.lock.
#
# Usage: scripts/bench-rls-redis.sh [ROUNDS] [SECONDS]
#   env: BINS ("target/release/tollgate"), CONCURRENCY ("1 64"),
#        CONNECTIONS (4), KEYS (10000), PORT (18095)
set -euo pipefail
rounds=${1:-2}
seconds=${2:-5}
bins=${BINS:-target/release/tollgate}
concurrencies=${CONCURRENCY:-1 64}
connections=${CONNECTIONS:-4}
keys=${KEYS:-10000}
port=${PORT:-18095}
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || { echo "redis-server is missing" >&2; exit 1; }
cargo build --release -q -p tollgate-cli -p tollgate-envoy --examples --bins
load=target/release/examples/rls_load

exec 9>/tmp/tollgate-bench.lock
flock 9

redis_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis= server=
stop_server() {
    if [ -n "$server" ]; then kill -INT "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    server=
}
cleanup() {
    stop_server
    if [ -n "$redis" ]; then kill "$redis" 2>/dev/null || true; wait "$redis" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null &
redis=$!
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

# Limits no call reaches: every call is decided, and allowed.
cat >"$dir/tollgate.toml" <<EOF
default_plan = "per-ip"
[store]
url = "redis://127.0.0.1:$redis_port"
timeout = "1s"
[envoy]
grpc_listen = "127.0.0.1:$port"
[[envoy.rules]]
domain = "edge"
descriptor = [{ key = "remote_address" }]
plan = "per-ip"
[[envoy.rules]]
domain = "edge"
descriptor = [{ key = "api_key" }]
plan = "per-key"
[[plans.per-ip]]
name = "1m"
policy = "gcra"
limit = 2000
window = "1m"
[[plans.per-key]]
name = "1m"
policy = "sliding-window"
limit = 2000
window = "1m"
EOF

calls() { redis-cli -p "$redis_port" info commandstats | awk -F'[:=,]' '/^cmdstat_evalsha:/ { print $3 }'; }

for round in $(seq "$rounds"); do
    for bin in $bins; do
        "$bin" serve --config "$dir/tollgate.toml" --listen 127.0.0.1:0 >/dev/null 2>&1 &
        server=$!
        for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
        for mode in rls rls2; do
            for concurrency in $concurrencies; do
                before=$(calls); before=${before:-0}
                "$load" addr="127.0.0.1:$port" mode="$mode" connections="$connections" \
                    concurrency="$concurrency" seconds="$seconds" keys="$keys" threads=1 >"$dir/out"
                after=$(calls)
                # The Redis calls over the run and its warm-up second, per
                # call at the measured rate (as bench-grpc.sh's CPU figure).
                awk -v bin="$bin" -v round="$round" -v c="$concurrency" -v s="$seconds" \
                    -v sent=$((after - before)) \
                    '/calls\/s=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                                   printf "%s round %s mode=%s concurrency=%s calls/s=%s p50=%s p99=%s redis-calls/call=%.2f\n",
                                       bin, round, v["mode"], c, v["calls/s"], v["p50"], v["p99"],
                                       sent / (v["calls/s"] * (s + 1)) }' "$dir/out"
            done
        done
        stop_server
    done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
