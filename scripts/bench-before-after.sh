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
set -euo pipefail
cd "$(dirname "$0")/.."

OLD=${1:?usage: scripts/bench-before-after.sh OLD_COMMIT}
ROUNDS=${ROUNDS:-3}
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
