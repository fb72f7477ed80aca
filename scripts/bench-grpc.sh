#!/usr/bin/env bash
# Envoy RLS against its own transport's ceiling (BENCHMARKS.md, "Envoy RLS over gRPC").
# One rls_server (memory store, crates/tollgate-envoy/examples/rules.toml);
# each round runs rls_load twice on it, alternately: ShouldRateLimit, then
# grpc.health.v1.Health/Check, both CONNECTIONS connections x INFLIGHT calls
# in flight for SECONDS seconds (after a 1 s warm-up). Prints calls/s, p50,
# p99, the server's CPU microseconds per call, the ratio RLS/health of each
# round, their medians and the load average. SERVER: another rls_server
# binary (an older build, for a before/after).
# Loopback only; the server is stopped by its PID at the end. Builds first,
# then measures under flock /tmp/tollgate-bench.lock (one benchmark at a time).
#
# Usage: scripts/bench-grpc.sh [ROUNDS] [SECONDS]
#   env: CONNECTIONS (4), INFLIGHT (64), KEYS (10000), PORT (18091),
#        LOAD_THREADS (rls_load's runtime threads; default 1: the load generator
#        then takes about one core and leaves the server the other),
#        SERVER (the rls_server binary; default this tree's),
#        WORKERS (the server's threads; default one per core),
#        SERVER_CPUS / CLIENT_CPUS (taskset lists for the server and rls_load;
#        default no pinning), e.g. SERVER_CPUS=1 CLIENT_CPUS=0 WORKERS=1,
#        RLS_MODE (rls_load's mode for the decisions: rls, one client per
#        call, the default; rls2, two)
set -euo pipefail
rounds=${1:-3}
seconds=${2:-5}
connections=${CONNECTIONS:-4}
inflight=${INFLIGHT:-64}
keys=${KEYS:-10000}
port=${PORT:-18091}
threads=${LOAD_THREADS:-1}
server_cpus=${SERVER_CPUS:-}
client_cpus=${CLIENT_CPUS:-}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench/on-cpus.sh
. scripts/bench/on-cpus.sh
cargo build --release -q -p tollgate-envoy --examples
bin=target/release/examples

exec 9>/tmp/tollgate-bench.lock
flock 9

server=
tmp=$(mktemp)
cleanup() {
    if [ -n "$server" ]; then kill -INT "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -f "$tmp"
}
trap cleanup EXIT
# shellcheck disable=SC2086 # WORKERS: no argument when unset
(on_cpus "$server_cpus" "${SERVER:-$bin/rls_server}" "127.0.0.1:$port" ${WORKERS:-}) >/dev/null &
server=$!
for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done

# The server's CPU time so far (user + system), in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server/stat"; }

# One run: "calls/s p50 p99 cpu" (ms; cpu: the server's CPU microseconds per
# call, user + system, over the run and its warm-up second, which runs at
# about the same rate), from rls_load's last line.
run() {
    local before after
    before=$(cpu_ticks)
    (on_cpus "$client_cpus" "$bin/rls_load" addr="127.0.0.1:$port" mode="$1" connections="$connections" \
        concurrency="$inflight" seconds="$seconds" keys="$keys" threads="$threads") >"$tmp"
    after=$(cpu_ticks)
    awk -v ticks=$((after - before)) -v hz="$(getconf CLK_TCK)" -v s="$seconds" \
        '/calls\/s=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                       sub("ms", "", v["p50"]); sub("ms", "", v["p99"]);
                       printf "%s %s %s %.1f\n", v["calls/s"], v["p50"], v["p99"],
                           ticks / hz * 1e6 / (v["calls/s"] * (s + 1)) }' "$tmp"
}

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "## Envoy RLS vs gRPC health, ${connections} connections x ${inflight} in flight, ${seconds}s per run, $(nproc) cores, server workers ${WORKERS:-default}, load threads $threads${server_cpus:+, server on cores $server_cpus}${client_cpus:+, load on cores $client_cpus}"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
fmt='%-6s %9s %7s %7s %7s %9s %7s %7s %7s %6s  %s\n'
printf "$fmt" round rls/s p50 p99 cpu_us health/s p50 p99 cpu_us ratio loadavg
rls_rates=() health_rates=() ratios=() rls_p99s=() health_p99s=()
for round in $(seq "$rounds"); do
    read -r rls rls_p50 rls_p99 rls_cpu < <(run "${RLS_MODE:-rls}")
    read -r health health_p50 health_p99 health_cpu < <(run health)
    ratio=$(awk -v a="$rls" -v b="$health" 'BEGIN { printf "%.2f", a / b }')
    rls_rates+=("$rls") health_rates+=("$health") ratios+=("$ratio")
    rls_p99s+=("$rls_p99") health_p99s+=("$health_p99")
    printf "$fmt" "$round" "$rls" "$rls_p50" "$rls_p99" "$rls_cpu" \
        "$health" "$health_p50" "$health_p99" "$health_cpu" "$ratio" "$(cut -d' ' -f1 /proc/loadavg)"
done
printf "$fmt" median \
    "$(printf '%s\n' "${rls_rates[@]}" | median)" - "$(printf '%s\n' "${rls_p99s[@]}" | median)" - \
    "$(printf '%s\n' "${health_rates[@]}" | median)" - "$(printf '%s\n' "${health_p99s[@]}" | median)" - \
    "$(printf '%s\n' "${ratios[@]}" | median)" "$(cut -d' ' -f1-3 /proc/loadavg)"
