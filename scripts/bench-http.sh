#!/usr/bin/env bash
# Issue 12's HTTP target, side by side in one run on one server: GET /healthz
# (no decision: the transport's ceiling), POST /v1/check and GET /v1/auth
# (10,000 clients in turn), alternating, ROUNDS rounds, one wrk thread beside
# the server. Prints each run's requests/s, p50, p99 and server CPU per
# request, then the ratios check/healthz and auth/healthz per round and
# their medians, with the load average.
#
#   flock /tmp/tollgate-bench.lock scripts/bench-http.sh
#   ROUNDS=5 DURATION=15s CONNECTIONS=64 scripts/bench-http.sh
#   BIN=/tmp/tollgate-old NO_BUILD=1 scripts/bench-http.sh   # another build
#   SERVER_CPUS=1 CLIENT_CPUS=0 scripts/bench-http.sh         # the server and wrk on cores of their own
#
# Two baselines: `healthz` is wrk's one prebuilt request (the cheapest load
# wrk can generate); `healthz-lua` builds each request in Lua
# (scripts/bench/healthz.lua), as check.lua and auth.lua must, so that wrk's
# own work per request is the same as for the decisions. The ratios are
# given against both.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench/on-cpus.sh
. scripts/bench/on-cpus.sh

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
BIN=${BIN:-target/release/tollgate}
PORT=${PORT:-18182}
SERVER_CPUS=${SERVER_CPUS:-}  # taskset lists; default: no pinning
CLIENT_CPUS=${CLIENT_CPUS:-}
URL="http://127.0.0.1:$PORT"
LOADS=(healthz healthz-lua check auth)

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
[ -n "${NO_BUILD:-}" ] || cargo build --release -p tollgate-cli >&2

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime + stime
TICK_US=$((1000000 / $(getconf CLK_TCK)))
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

wrk_args() { # wrk_args LOAD: the URL and script of one load
  case $1 in
    healthz) echo "$URL/healthz" ;;
    healthz-lua) echo "-s scripts/bench/healthz.lua $URL" ;;
    check) echo "-s scripts/bench/check.lua $URL" ;;
    auth) echo "-s scripts/bench/auth.lua $URL" ;;
  esac
}

to_ms() { # wrk's latency (e.g. 283.00us, 1.75ms, 1.02s) in ms
  awk -v v="$1" 'BEGIN {
    n = v + 0
    if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000
    printf "%.2f", n }'
}

(on_cpus "$SERVER_CPUS" "$BIN" serve --listen "127.0.0.1:$PORT" --grpc-listen off) >/tmp/tollgate-bench-http.out 2>/tmp/tollgate-bench-http.err &
SERVER=$!
trap 'kill -TERM "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  curl -fs "$URL/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fs "$URL/healthz" >/dev/null || { echo "the server did not start" >&2; cat /tmp/tollgate-bench-http.err >&2; exit 1; }

if [ "$BIN" = target/release/tollgate ]; then
  built="built from $(git rev-parse --short HEAD)$(git diff --quiet || echo ', modified')"
else
  built="given by BIN"
fi
echo "machine: $(nproc) cores; $BIN ($built)"
echo "$ROUNDS rounds of ${LOADS[*]}, $CONNECTIONS connections, wrk -t1, $DURATION each"
echo "load average at the start: $(loadavg)"
[ -z "$SERVER_CPUS$CLIENT_CPUS" ] || echo "pinned: server on cores ${SERVER_CPUS:-any}, wrk on ${CLIENT_CPUS:-any}"
for load in "${LOADS[@]}"; do
  # shellcheck disable=SC2046
  wrk -t1 -c8 -d2s $(wrk_args "$load") >/dev/null # warm-up
done

declare -A RPS
printf '%-6s %-12s %10s %8s %8s %12s  %s\n' round load 'req/s' 'p50 ms' 'p99 ms' 'CPU us/req' 'load average'
for round in $(seq "$ROUNDS"); do
  for load in "${LOADS[@]}"; do
    before=$(cpu_ticks "$SERVER")
    # shellcheck disable=SC2046
    out=$(on_cpus "$CLIENT_CPUS" wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency $(wrk_args "$load"))
    after=$(cpu_ticks "$SERVER")
    requests=$(awk '/requests in/ {print $1}' <<<"$out")
    rps=$(awk '/^Requests\/sec/ {printf "%.0f", $2}' <<<"$out")
    p50=$(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")
    p99=$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
    errors=$(awk '/Non-2xx|Socket errors/' <<<"$out")
    cpu=$(awk -v t="$(( (after - before) * TICK_US ))" -v n="$requests" 'BEGIN {printf "%.1f", t / n}')
    RPS[$round,$load]=$rps
    printf '%-6s %-12s %10s %8s %8s %12s  %s\n' "$round" "$load" "$rps" "$p50" "$p99" "$cpu" "$(loadavg)"
    [ -z "$errors" ] || echo "       $errors"
  done
done

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo
echo "ratios per round (decisions/s over the baseline's requests/s):"
for base in healthz healthz-lua; do
  for load in check auth; do
    ratios=$(for round in $(seq "$ROUNDS"); do
      awk -v a="${RPS[$round,$load]}" -v b="${RPS[$round,$base]}" 'BEGIN {printf "%.3f\n", a / b}'
    done)
    echo "  $load/$base: $(echo "$ratios" | tr '\n' ' ') median $(echo "$ratios" | median)"
  done
done
echo "load average at the end: $(loadavg)"
kill -TERM "$SERVER"
wait "$SERVER" || true
trap - EXIT
