#!/usr/bin/env bash
# What counting one decision in the metrics costs, this tree against another
# commit (default: main), built side by side and run alternating in one run
# (criterion bench `crates/tollgate-server/benches/metrics.rs`, copied into a
# temporary worktree of the base commit: it uses only the metrics' public API).
#
#   scripts/bench-metrics.sh            # against main, 3 rounds
#   ROUNDS=5 scripts/bench-metrics.sh 1a2b3c4
#
# Prints criterion's estimate (middle of [low estimate high]) per round.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${1:-main}
ROUNDS=${ROUNDS:-3}
TARGET=$PWD/target
OLD=$(mktemp -d /tmp/tollgate-metrics-base.XXXXXX)
git worktree add --quiet --detach "$OLD" "$BASE"
trap 'git worktree remove --force "$OLD"' EXIT

mkdir -p "$OLD/crates/tollgate-server/benches"
cp crates/tollgate-server/benches/metrics.rs "$OLD/crates/tollgate-server/benches/"
if ! grep -q '^name = "metrics"' "$OLD/crates/tollgate-server/Cargo.toml"; then
  sed -i 's/^\[dev-dependencies\]/[dev-dependencies]\ncriterion.workspace = true/' \
    "$OLD/crates/tollgate-server/Cargo.toml"
  printf '\n[[bench]]\nname = "metrics"\nharness = false\n' >>"$OLD/crates/tollgate-server/Cargo.toml"
fi

build() { # build DIR: prints the bench executable's path
  (cd "$1" && CARGO_TARGET_DIR=$TARGET cargo bench -p tollgate-server --bench metrics --no-run 2>&1) |
    sed -n 's/.*Executable .*(\(.*\))$/\1/p'
}
NEW_BIN=$(build "$PWD")
OLD_BIN=$(build "$OLD")
[ -x "$NEW_BIN" ] && [ -x "$OLD_BIN" ] || { echo "build failed" >&2; exit 1; }

echo "machine: $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "base: $BASE ($(git rev-parse --short "$BASE")), this tree: $(git rev-parse --short HEAD)$(git diff --quiet || echo +changes)"
for round in $(seq "$ROUNDS"); do
  for side in old new; do
    bin=$OLD_BIN; [ "$side" = new ] && bin=$NEW_BIN
    "$bin" --bench --warm-up-time 1 --measurement-time 3 --noplot 2>/dev/null |
      awk -v side="$side" -v round="$round" '
        /^metrics per decision\// { name = $0; sub(/^metrics per decision\//, "", name); sub(/ +time:.*/, "", name) }
        /time:/ { print "round " round ", " side ": " name ": " $(NF-3) " " $(NF-2) }'
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
