#!/usr/bin/env bash
# Instructions per gRPC call on the server, independent of the machine's load
# (BENCHMARKS.md, "Envoy RLS over gRPC"): rls_server runs under
# valgrind --tool=callgrind while rls_load makes a fixed number of calls,
# then the server is stopped by its PID (SIGINT, it exits cleanly and
# callgrind writes its counts). Twice per mode, with FEW and MANY calls: the
# difference of the totals over MANY - FEW calls is the cost of one call
# without the start-up and shutdown.
#
# Usage: scripts/callgrind-grpc.sh [OUT_DIR]
#   env: FEW (2000), MANY (12000), CONNECTIONS (4), INFLIGHT (64), PORT (18092),
#        MODES ("rls health"), SERVER (the rls_server binary; default this tree's)
set -euo pipefail
out=${1:-target/callgrind-grpc}
few=${FEW:-2000}
many=${MANY:-12000}
connections=${CONNECTIONS:-4}
inflight=${INFLIGHT:-64}
port=${PORT:-18092}
modes=${MODES:-rls health}
cd "$(dirname "$0")/.."
cargo build --release -q -p tollgate-envoy --examples
bin=target/release/examples
mkdir -p "$out"

server=
cleanup() { if [ -n "$server" ]; then kill -INT "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi; }
trap cleanup EXIT

# Total instructions of the server over `calls` calls of `mode`.
measure() {
    local mode=$1 calls=$2 file="$out/callgrind.$1.$2.out"
    valgrind --tool=callgrind --callgrind-out-file="$file" \
        "${SERVER:-$bin/rls_server}" "127.0.0.1:$port" >/dev/null 2>"$out/valgrind.$mode.$calls.log" &
    server=$!
    for _ in $(seq 300); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
    "$bin/rls_load" addr="127.0.0.1:$port" mode="$mode" connections="$connections" \
        concurrency="$inflight" calls="$calls" keys=10000 >"$out/load.$mode.$calls.txt"
    kill -INT "$server"
    wait "$server" || true
    server=
    awk '/^totals:/ { print $2 }' "$file"
}

echo "## instructions per call on the server (callgrind), ${connections} connections x ${inflight} in flight"
for mode in $modes; do
    small=$(measure "$mode" "$few")
    large=$(measure "$mode" "$many")
    awk -v m="$mode" -v a="$small" -v b="$large" -v f="$few" -v n="$many" \
        'BEGIN { printf "%-7s %d instructions per call ((%d - %d) / (%d - %d))\n", m, (b - a) / (n - f), b, a, n, f }'
done
echo "profiles: $out/callgrind.MODE.$many.out (callgrind_annotate --inclusive=yes FILE)"
