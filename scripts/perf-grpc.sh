#!/usr/bin/env bash
# Where the server's CPU time goes (BENCHMARKS.md, "Envoy RLS over gRPC"):
# rls_server under rls_load (CONNECTIONS x INFLIGHT, MODE), sampled by
# `perf record -e cpu-clock -g` for SECONDS; prints the shares of kernel,
# allocator, and the top symbols. Needs perf (and root, or
# kernel.perf_event_paranoid <= 1, for the kernel's share).
#
# Usage: scripts/perf-grpc.sh [MODE] [SECONDS] [OUT_DIR]
#   env: CONNECTIONS (4), INFLIGHT (64), PORT (18094), SERVER (target/release/examples/rls_server)
set -euo pipefail
mode=${1:-rls}
seconds=${2:-5}
out=${3:-target/perf-grpc}
connections=${CONNECTIONS:-4}
inflight=${INFLIGHT:-64}
port=${PORT:-18094}
cd "$(dirname "$0")/.."
cargo build --release -q -p tollgate-envoy --examples
bin=target/release/examples
server_bin=${SERVER:-$bin/rls_server}
mkdir -p "$out"

exec 9>/tmp/tollgate-bench.lock
flock 9

server=
cleanup() { if [ -n "$server" ]; then kill -INT "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi; }
trap cleanup EXIT
"$server_bin" "127.0.0.1:$port" >/dev/null &
server=$!
for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done
"$bin/rls_load" addr="127.0.0.1:$port" mode="$mode" connections="$connections" \
    concurrency="$inflight" seconds="$((seconds + 1))" keys=10000 >"$out/load.$mode.txt" &
load=$!
sleep 1
perf record -q -e cpu-clock -g -p "$server" -o "$out/perf.$mode.data" -- sleep "$seconds" 2>/dev/null
wait "$load"
tail -n1 "$out/load.$mode.txt"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
perf report -i "$out/perf.$mode.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -8
perf report -i "$out/perf.$mode.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -25
