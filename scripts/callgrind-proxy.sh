#!/usr/bin/env bash
# CPU instructions per forwarded request of `tollgate proxy` (one worker),
# counted by callgrind, independent of the machine's load (BENCHMARKS.md,
# "tollgate proxy against nginx").
#
#   scripts/callgrind-proxy.sh                    # target/release/tollgate
#   scripts/callgrind-proxy.sh /tmp/tollgate-old  # another build, for a before/after
#   N1=2000 N2=12000 KEEP=/tmp/cg scripts/callgrind-proxy.sh   # keep the callgrind files
#
# The proxy runs twice under callgrind, forwarding N1 then N2 requests
# (curl, one after another on one kept-alive connection) to the
# hello_upstream example, with a limit nobody reaches (per client IP, as
# scripts/bench-proxy.sh); the per-request figure is the difference of the
# two totals over N2 - N1, so start-up and shutdown cancel out. Every
# process started here is stopped by its PID.
set -euo pipefail
cd "$(dirname "$0")/.."

TOLLGATE=${1:-target/release/tollgate}
N1=${N1:-2000}
N2=${N2:-12000}
UPSTREAM_PORT=13200
PROXY_PORT=18186

command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install -y valgrind" >&2; exit 1; }
cargo build --release -q -p tollgate-proxy --example hello_upstream >&2
DIR=$(mktemp -d /tmp/tollgate-callgrind-proxy.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    rm -rf "$DIR"
}
trap cleanup EXIT

target/release/examples/hello_upstream "127.0.0.1:$UPSTREAM_PORT" >/dev/null & pids+=($!)

count() { # count N: the proxy's instructions over its whole life, forwarding N requests
    valgrind --tool=callgrind --callgrind-out-file="$DIR/callgrind.$1" \
        "$TOLLGATE" proxy --workers 1 --upstream "http://127.0.0.1:$UPSTREAM_PORT" \
        --listen "127.0.0.1:$PROXY_PORT" --key peer --policy gcra --limit 1000000 --window 1s \
        >/dev/null 2>"$DIR/valgrind.$1.log" &
    local pid=$!
    for _ in $(seq 600); do
        curl -fs -o /dev/null "http://127.0.0.1:$PROXY_PORT/" && break
        sleep 0.1
    done
    # N requests one after another on one kept-alive connection (curl's URL ranges).
    curl -fs "http://127.0.0.1:$PROXY_PORT/?[1-$1]" >/dev/null
    kill -TERM "$pid"
    wait "$pid" || true
    awk '/^summary:/ {print $2}' "$DIR/callgrind.$1"
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$DIR/callgrind.$1" "$KEEP/"; fi
}

i1=$(count "$N1")
i2=$(count "$N2")
echo "$TOLLGATE: $i1 instructions for $N1 requests, $i2 for $N2: $(( (i2 - i1) / (N2 - N1) )) per forwarded request"
