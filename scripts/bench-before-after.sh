#!/usr/bin/env bash
# The core decision rate and `tollgate serve`'s decisions/s, before and after a
# change, in one run on one machine: the commit OLD (built side by side in its
# own worktree and target directory) against the working tree, run alternately
# so that both meet the same load.
#
#   scripts/bench-before-after.sh OLD_COMMIT            # e.g. the commit before a restructuring
#   ROUNDS=3 DURATION=10s CORE_FILTER=single-thread scripts/bench-before-after.sh 4132a4e
#
# Needs wrk (apt-get install -y wrk). Builds in release mode twice: run it on
# a machine that is otherwise quiet, and quote the ratios of one run.
#
# Then (CALLGRIND=1, the default; needs valgrind) the same two builds under
# `valgrind --tool=callgrind`, which counts instructions, not seconds: the
# same figure on a quiet machine and on a busy one. `serve`: instructions per
# request over one keep-alive connection (scripts/bench/hammer.py, a fixed
# count after a warm-up, counters zeroed in between) for POST /v1/check,
# GET /v1/auth and GET /healthz; the core: instructions per call of `tollgate
# replay` on a generated session (scripts/gen-replay.py, token bucket and
# sliding window), start-up subtracted with an empty session.
set -euo pipefail
cd "$(dirname "$0")/.."

OLD=${1:?usage: scripts/bench-before-after.sh OLD_COMMIT}
ROUNDS=${ROUNDS:-3}
CALLGRIND=${CALLGRIND:-1}
REQUESTS=${REQUESTS:-20000}
CALLS=${CALLS:-200000}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32}
CORE_FILTER=${CORE_FILTER:-single-thread}
OLD_TREE=${OLD_TREE:-/tmp/tollgate-before}
OLD_TARGET=${OLD_TARGET:-/tmp/tollgate-before-target}
PORT=18182

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
if [ ! -d "$OLD_TREE" ]; then git worktree add --detach "$OLD_TREE" "$OLD" >&2; fi
git -C "$OLD_TREE" checkout --detach --quiet "$OLD"
echo "before: $(git -C "$OLD_TREE" log -1 --format='%h %s' | cut -c1-100)"
echo "after:  $(git log -1 --format='%h %s' | cut -c1-100) (working tree)"

# Separate target directories: cargo would otherwise take one tree's build for the other's.
(cd "$OLD_TREE" && CARGO_TARGET_DIR="$OLD_TARGET" cargo build --release -p tollgate-cli >&2 \
  && CARGO_TARGET_DIR="$OLD_TARGET" cargo bench -p tollgate --bench decisions --no-run >&2)
cargo build --release -p tollgate-cli >&2
cargo bench -p tollgate --bench decisions --no-run >&2
newest() { ls -t "$1"/release/deps/decisions-* | grep -v '\.d$' | head -1; }
declare -A SERVE=([before]="$OLD_TARGET/release/tollgate" [after]=target/release/tollgate)
declare -A CORE=([before]="$(newest "$OLD_TARGET")" [after]="$(newest target)")

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime + stime
TICK_US=$((1000000 / $(getconf CLK_TCK)))
serve_round() { # serve_round before|after: decisions/s and server CPU per decision
  "${SERVE[$1]}" serve --listen "127.0.0.1:$PORT" --grpc-listen 127.0.0.1:0 >/dev/null 2>&1 &
  local server=$! before after requests
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  wrk -t1 -c8 -d2s -s scripts/bench/check.lua "http://127.0.0.1:$PORT" >/dev/null # warm-up
  before=$(cpu_ticks "$server")
  wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s scripts/bench/check.lua "http://127.0.0.1:$PORT" >/tmp/tollgate-before-after.wrk
  after=$(cpu_ticks "$server")
  kill -TERM "$server"; wait "$server" || true
  requests=$(awk '/requests in/ {print $1}' /tmp/tollgate-before-after.wrk)
  echo "serve $1: $(awk '/Requests\/sec/ {print $2}' /tmp/tollgate-before-after.wrk) decisions/s, server CPU $(( (after - before) * TICK_US / requests )) us per decision"
}

echo "machine: $(nproc) cores"
for round in $(seq "$ROUNDS"); do
  for side in before after; do
    echo "== round $round, $side, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    "${CORE[$side]}" --bench "$CORE_FILTER" --warm-up-time 1 --measurement-time 3 2>/dev/null \
      | awk -v side="$side" '/^[a-z].*\// {name=$1} /time:/ {print "core " side ": " name " " $0}'
    serve_round "$side"
  done
done

[ "$CALLGRIND" = 1 ] || exit 0
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install -y valgrind" >&2; exit 1; }
WORK=$(mktemp -d)
CG_SERVER=0
trap 'kill -TERM "$CG_SERVER" 2>/dev/null || true; rm -rf "$WORK"' EXIT

callgrind_serve() { # callgrind_serve before|after KIND: instructions per request
  if curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1; then
    echo "something already serves 127.0.0.1:$PORT: stop it first" >&2; exit 1
  fi
  valgrind --tool=callgrind --callgrind-out-file="$WORK/serve.%p" \
    "${SERVE[$1]}" serve --listen "127.0.0.1:$PORT" --grpc-listen 127.0.0.1:0 >/dev/null 2>&1 &
  local server=$! total
  CG_SERVER=$server
  for _ in $(seq 300); do curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  python3 scripts/bench/hammer.py "127.0.0.1:$PORT" "$2" 2000 # warm-up: every table and buffer grown
  callgrind_control --zero "$server" >/dev/null
  python3 scripts/bench/hammer.py "127.0.0.1:$PORT" "$2" "$REQUESTS"
  callgrind_control --dump="$2" "$server" >/dev/null
  kill -TERM "$server"; wait "$server" || true
  total=$(grep -h '^summary:' $(grep -l "^desc: Trigger: dump $2" "$WORK"/serve.*) | awk '{s += $2} END {print s}')
  rm -f "$WORK"/serve.*
  echo "callgrind serve $1 $2: $((total / REQUESTS)) instructions per request"
}

callgrind_replay() { # callgrind_replay before|after POLICY: instructions per call
  local calls empty
  python3 scripts/gen-replay.py "$CALLS" "$2" >"$WORK/session.replay"
  head -1 "$WORK/session.replay" >"$WORK/empty.replay"
  calls=$(valgrind --tool=callgrind --callgrind-out-file="$WORK/replay.out" \
    "${SERVE[$1]}" replay "$WORK/session.replay" 2>&1 >/dev/null | awk '/Collected :/ {print $4}')
  empty=$(valgrind --tool=callgrind --callgrind-out-file="$WORK/replay.out" \
    "${SERVE[$1]}" replay "$WORK/empty.replay" 2>&1 >/dev/null | awk '/Collected :/ {print $4}')
  echo "callgrind replay $1 $2: $(((calls - empty) / CALLS)) instructions per call"
}

for side in before after; do
  for kind in check auth healthz; do callgrind_serve "$side" "$kind"; done
  for policy in token-bucket sliding-window; do callgrind_replay "$side" "$policy"; done
done
