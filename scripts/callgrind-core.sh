#!/usr/bin/env bash
# The core's cost per decision whatever the machine's load: for every subject
# of the criterion bench `decisions` (benches/subject.rs), instructions per
# decision under callgrind at 1,000 and 100,000 clients, and simulated
# first-level data-cache misses per decision under cachegrind at 100,000.
# Each figure is the difference of two runs of examples/decide_count (N and
# 2N decisions, N = 300,000 unless set: every client seen again) divided by
# N, so start-up and warm-up cancel out.
#
#   scripts/callgrind-core.sh                      # builds and measures the working tree
#   scripts/callgrind-core.sh /tmp/decide_count    # a decide_count built elsewhere (e.g. an older commit)
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${1:-}
if [ -z "$BIN" ]; then
  cargo build --release -p tollgate --example decide_count >&2
  BIN=target/release/examples/decide_count
fi
N=${N:-300000}
SUBJECTS=(token-bucket sliding-window gcra governor-keyed)

# Total of one counter in valgrind's summary for `tool` on `subject clients calls`.
count() {
  local tool=$1 what=$2 subject=$3 clients=$4 calls=$5 sim=()
  [ "$tool" = cachegrind ] && sim=(--cache-sim=yes)
  valgrind --tool="$tool" "${sim[@]}" --"$tool"-out-file=/dev/null "$BIN" "$subject" "$clients" "$calls" 2>&1 |
    grep -E "$what" | head -1 | sed -E 's/.*: *([0-9,]+).*/\1/' | tr -d ,
}
per_decision() {
  local a b
  a=$(count "$@" "$N")
  b=$(count "$@" $((2 * N)))
  python3 -c "print(f'{($b - $a) / $N:.2f}')"
}

printf '%-16s %12s %12s %16s\n' subject 'instr (1k)' 'instr (100k)' 'D1 misses (100k)'
for s in "${SUBJECTS[@]}"; do
  i1=$(per_decision callgrind 'Collected' "$s" 1000)
  i2=$(per_decision callgrind 'Collected' "$s" 100000)
  d1=$(per_decision cachegrind 'D1  misses' "$s" 100000)
  printf '%-16s %12.0f %12.0f %16s\n' "$s" "$i1" "$i2" "$d1"
done
