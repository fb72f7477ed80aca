#!/usr/bin/env bash
# Instructions per request of `tollgate serve` over HTTP, independent of the
# machine's load: the server runs under callgrind, wrk drives a counted
# number of requests after a warm-up, and the counters cover only those
# (zeroed before, dumped after, with callgrind_control).
#
#   scripts/profile-http.sh                       # healthz, check, auth
#   BIN=/tmp/tollgate-old NO_BUILD=1 OUT=/tmp/cg-old scripts/profile-http.sh
#   SERVE_ARGS="--redis redis://127.0.0.1:16999" LOADS=check scripts/profile-http.sh   # on a Redis you started
#   callgrind_annotate --inclusive=yes OUT/check.out | less   # where they go
#
# User-space instructions only: the kernel's share (the loopback TCP path,
# epoll, futex) is not in these counts.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-target/release/tollgate}
OUT=${OUT:-/tmp/tollgate-callgrind}
PORT=${PORT:-18183}
DURATION=${DURATION:-8s}
CONNECTIONS=${CONNECTIONS:-8}
URL="http://127.0.0.1:$PORT"
LOADS=${LOADS:-healthz check auth}
SERVE_ARGS=${SERVE_ARGS:-}  # more flags for serve (a store, a config)

[ -n "${NO_BUILD:-}" ] || cargo build --release -p tollgate-cli >&2
mkdir -p "$OUT"

wrk_args() {
  case $1 in
    healthz) echo "-s scripts/bench/healthz.lua $URL" ;;
    check) echo "-s scripts/bench/check.lua $URL" ;;
    auth) echo "-s scripts/bench/auth.lua $URL" ;;
  esac
}

printf '%-8s %10s %14s %12s\n' load requests instructions 'per request'
for load in $LOADS; do
  # shellcheck disable=SC2086 # SERVE_ARGS: several words
  valgrind --tool=callgrind --callgrind-out-file="$OUT/$load.out" \
    "$BIN" serve --listen "127.0.0.1:$PORT" --grpc-listen off $SERVE_ARGS \
    >"$OUT/$load.stdout" 2>"$OUT/$load.stderr" &
  server=$!
  for _ in $(seq 300); do
    curl -fs "$URL/healthz" >/dev/null 2>&1 && break
    sleep 0.2
  done
  # shellcheck disable=SC2046
  wrk -t1 -c"$CONNECTIONS" -d2s $(wrk_args "$load") >/dev/null # warm-up
  callgrind_control -z "$server" >/dev/null
  # shellcheck disable=SC2046
  requests=$(wrk -t1 -c"$CONNECTIONS" -d"$DURATION" $(wrk_args "$load") | awk '/requests in/ {print $1}')
  callgrind_control -d "$server" >/dev/null
  kill -TERM "$server"
  wait "$server" || true
  # The dump of the counted part is the file with a ".N" suffix.
  dump=$(ls -t "$OUT/$load.out".* | head -1)
  total=$(awk '/^summary:/ {print $2}' "$dump")
  mv "$dump" "$OUT/$load.out"
  rm -f "$OUT/$load.out".*
  printf '%-8s %10s %14s %12s\n' "$load" "$requests" "$total" "$((total / requests))"
done
