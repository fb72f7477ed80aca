#!/usr/bin/env bash
# Envoy RLS against its own transport's ceiling (BENCHMARKS.md, "Envoy RLS over gRPC").
# One rls_server (memory store, crates/tollgate-envoy/examples/rules.toml);
# each round runs rls_load twice on it, alternately: ShouldRateLimit, then
# grpc.health.v1.Health/Check, both CONNECTIONS connections x INFLIGHT calls
# in flight for SECONDS seconds (after a 1 s warm-up). Prints calls/s, p50,
# p99, the ratio RLS/health of each round, their medians and the load average.
# Loopback only; the server is stopped by its PID at the end. Builds first,
# then measures under flock /tmp/tollgate-bench.lock (one benchmark at a time).
#
# Usage: scripts/bench-grpc.sh [ROUNDS] [SECONDS]
#   env: CONNECTIONS (4), INFLIGHT (64), KEYS (10000), PORT (18091),
#        LOAD_THREADS (rls_load's runtime threads; default one per core)
set -euo pipefail
rounds=${1:-3}
seconds=${2:-5}
connections=${CONNECTIONS:-4}
inflight=${INFLIGHT:-64}
keys=${KEYS:-10000}
port=${PORT:-18091}
threads=${LOAD_THREADS:-0}
cd "$(dirname "$0")/.."
cargo build --release -q -p tollgate-envoy --examples
bin=target/release/examples

exec 9>/tmp/tollgate-bench.lock
flock 9

server=
cleanup() { if [ -n "$server" ]; then kill -INT "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi; }
trap cleanup EXIT
"$bin/rls_server" "127.0.0.1:$port" >/dev/null &
server=$!
for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done

# One run: "calls/s p50 p99" (ms), from rls_load's last line.
run() {
    "$bin/rls_load" addr="127.0.0.1:$port" mode="$1" connections="$connections" \
        concurrency="$inflight" seconds="$seconds" keys="$keys" threads="$threads" |
        awk '/calls\/s=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                           sub("ms", "", v["p50"]); sub("ms", "", v["p99"]);
                           print v["calls/s"], v["p50"], v["p99"] }'
}

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "## Envoy RLS vs gRPC health, ${connections} connections x ${inflight} in flight, ${seconds}s per run, $(nproc) cores"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %10s %8s %8s %10s %8s %8s %7s  %s\n' round rls/s p50 p99 health/s p50 p99 ratio loadavg
rls_rates=() health_rates=() ratios=() rls_p99s=() health_p99s=()
for round in $(seq "$rounds"); do
    read -r rls rls_p50 rls_p99 < <(run rls)
    read -r health health_p50 health_p99 < <(run health)
    ratio=$(awk -v a="$rls" -v b="$health" 'BEGIN { printf "%.2f", a / b }')
    rls_rates+=("$rls") health_rates+=("$health") ratios+=("$ratio")
    rls_p99s+=("$rls_p99") health_p99s+=("$health_p99")
    printf '%-6s %10s %8s %8s %10s %8s %8s %7s  %s\n' "$round" "$rls" "$rls_p50" "$rls_p99" \
        "$health" "$health_p50" "$health_p99" "$ratio" "$(cut -d' ' -f1 /proc/loadavg)"
done
printf '%-6s %10s %8s %8s %10s %8s %8s %7s  %s\n' median \
    "$(printf '%s\n' "${rls_rates[@]}" | median)" - "$(printf '%s\n' "${rls_p99s[@]}" | median)" \
    "$(printf '%s\n' "${health_rates[@]}" | median)" - "$(printf '%s\n' "${health_p99s[@]}" | median)" \
    "$(printf '%s\n' "${ratios[@]}" | median)" "$(cut -d' ' -f1-3 /proc/loadavg)"
