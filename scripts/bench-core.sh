#!/usr/bin/env bash
# The core's targets of issue 12, in one run: the token bucket against
# governor keyed at 1,000 and 100,000 clients (single thread), the sliding
# log against the token bucket, and two threads (on distinct clients) against
# one. Runs the criterion bench `decisions` ROUNDS times (default 3) on the
# rows those ratios need, reads each row's median from criterion's
# estimates.json after every round, and prints every round's figures, the
# median of each row over the rounds, and the ratios of those medians, with
# the load average before each round.
#
#   scripts/bench-core.sh
#   ROUNDS=5 MEASUREMENT=5 scripts/bench-core.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
MEASUREMENT=${MEASUREMENT:-3}
FILTER='^(single-thread/(1k|100k)-clients|two-threads/100k-clients)/(token-bucket|sliding-window|governor-keyed)$'
ROWS=(
  single-thread_1k-clients/token-bucket single-thread_1k-clients/governor-keyed
  single-thread_100k-clients/token-bucket single-thread_100k-clients/governor-keyed
  single-thread_100k-clients/sliding-window two-threads_100k-clients/token-bucket
)

cargo bench -p tollgate --bench decisions --no-run >&2
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
median_ns() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' "target/criterion/$1/new/estimates.json"; }

echo "machine: $(nproc) cores"
for round in $(seq "$ROUNDS"); do
  echo "== round $round, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  cargo bench -q -p tollgate --bench decisions -- "$FILTER" \
    --warm-up-time 1 --measurement-time "$MEASUREMENT" --noplot >/dev/null 2>&1
  for row in "${ROWS[@]}"; do
    ns=$(median_ns "$row")
    printf '%-45s %8.1f ns\n' "$row" "$ns"
    echo "$row $ns" >>"$RESULTS"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$RESULTS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    row, ns = line.split()
    rows.setdefault(row, []).append(float(ns))
m = {row: statistics.median(v) for row, v in rows.items()}
print("\nmedian over the rounds (ns per decision; two threads: wall time per decision)")
for row, v in rows.items():
    print(f"  {row:45} {m[row]:8.1f}   rounds: {' / '.join(f'{x:.1f}' for x in v)}")
st = "single-thread_"
def ratio(label, faster, slower, target):
    r = m[slower] / m[faster]
    print(f"  {label:62} {r:5.2f}x  (target {target})")
print("\nratios of the medians (rate of the first over the second)")
ratio("token bucket / governor keyed, 1,000 clients", st + "1k-clients/token-bucket", st + "1k-clients/governor-keyed", ">= 1.3x")
ratio("token bucket / governor keyed, 100,000 clients", st + "100k-clients/token-bucket", st + "100k-clients/governor-keyed", ">= 1.5x")
ratio("sliding log / token bucket, 100,000 clients", st + "100k-clients/sliding-window", st + "100k-clients/token-bucket", ">= 0.7x")
ratio("two threads / one thread, token bucket, 100,000 clients", "two-threads_100k-clients/token-bucket", st + "100k-clients/token-bucket", ">= 1.7x")
PY
