#!/usr/bin/env bash
# A fleet of `tollgate serve` processes sharing one limit (issue 11): N = 1, 2,
# 4 and 8 servers on one private redis-server, then on a private 3-master
# Redis Cluster (never the shared Redis on 6379), under one load generator
# (crates/tollgate-testkit/examples/fleet_load.rs: keep-alive connections
# spread over every server, one thread, like `wrk -t1`, but it knows which
# client each answer was for).
#
# The plan is a sliding window of LIMIT per hour: longer than the run, so
# the requests a client had allowed across the whole fleet are what its one
# window allowed, and must be <= LIMIT ("over" in the table must be 0).
#
# Workloads, REQUESTS calls each (default 100,000):
#   spread:  10,000 clients, each well under its limit (LIMIT 100);
#   abusive: 1% of the clients (100) send 50% of the calls, 50x their limit
#            (LIMIT = REQUESTS / 2 / 100 / 50); the other 9,900 share the rest.
# For each: combined decisions/s, p50/p99, who decided (store, cache,
# failure policy), Redis calls per decision from INFO commandstats, and the
# CPU time per decision of Redis (INFO cpu) and of the servers (/proc/PID/stat,
# 10 ms ticks): unlike decisions/s, these hardly move with the machine's load.
# Each run is repeated for every BATCHING setting ("batch_max/batches_in_flight"
# of [store]: 1/1 sends every decision alone; on a cluster, the queues are
# per master).
# First the ceiling: redis-benchmark sending the same EVALSHA (captured with
# MONITOR from a real call; each call then with a random client and a
# receipt id of its own, so that each decides as the servers' calls do) on
# CONNECTIONS connections, and on as many
# connections as the servers of each SERVERS value hold (one each, a
# multiplexed one, so pipelined: CONNECTIONS / N deep).
#
#   scripts/bench-fleet.sh
#   REQUESTS=200000 CONNECTIONS=64 SERVERS="1 2 4" scripts/bench-fleet.sh
#   TOPOLOGIES=single SERVERS="1 4" BATCHING="1/1 64/1 64/2 64/4" scripts/bench-fleet.sh
# CONNECTIONS_PER_SERVER=64 replaces CONNECTIONS by 64 x N for N servers, so
# that each server keeps the same concurrency as the fleet grows (as each API
# server of a real fleet holds its own clients); the ceiling is then measured
# for every N on that many connections:
#   CONNECTIONS_PER_SERVER=64 SERVERS="1 4 8" scripts/bench-fleet.sh
# REDIS_CPUS / CLIENT_CPUS (taskset lists, default: no pinning) put Redis on
# cores of its own and the servers, the load generator and redis-benchmark
# on the others, so that the ceiling and the fleet get the same Redis:
#   REDIS_CPUS=1 CLIENT_CPUS=0 scripts/bench-fleet.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench/on-cpus.sh
. scripts/bench/on-cpus.sh

REQUESTS=${REQUESTS:-100000}
CONNECTIONS=${CONNECTIONS:-64}
CONNECTIONS_PER_SERVER=${CONNECTIONS_PER_SERVER:-}
SERVERS=${SERVERS:-"1 2 4 8"}
TOPOLOGIES=${TOPOLOGIES:-"single cluster"}
BATCHING=${BATCHING:-"1/1 64/1"}
REDIS_CPUS=${REDIS_CPUS:-}
CLIENT_CPUS=${CLIENT_CPUS:-}
REDIS_PORT=${REDIS_PORT:-16490}  # single node; the cluster uses the next three
SERVE_PORT=${SERVE_PORT:-18290}  # the servers use SERVE_PORT .. SERVE_PORT+7
PROFILE=${PROFILE:-release}       # PROFILE=debug: a quick check of the script itself
BIN=${BIN:-target/$PROFILE/tollgate}  # BIN=/tmp/tollgate-old: another build of serve
LOAD=target/$PROFILE/examples/fleet_load
WORK=$(mktemp -d)

command -v redis-server >/dev/null || { echo "redis-server is missing" >&2; exit 1; }
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is missing" >&2; exit 1; }
profile_flag=--release
[ "$PROFILE" = release ] || profile_flag=
cargo build $profile_flag -p tollgate-cli >&2
cargo build $profile_flag -p tollgate-testkit --example fleet_load >&2


REDIS_PIDS=()
SERVE_PIDS=()
cleanup() {
  for pid in "${SERVE_PIDS[@]}" ; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${REDIS_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

redis_up() { # redis_up PORT [extra redis-server args]
  local port=$1; shift
  mkdir -p "$WORK/r$port"
  (on_cpus "$REDIS_CPUS" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$WORK/r$port" "$@") >"$WORK/r$port.log" 2>&1 &
  REDIS_PIDS+=($!)
  for _ in $(seq 200); do
    [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && return
    sleep 0.01
  done
  echo "redis-server on $port did not start" >&2; exit 1
}

cluster_up() { # three masters on REDIS_PORT+1 .. +3
  local ports=() port
  for i in 1 2 3; do
    port=$((REDIS_PORT + i)); ports+=("127.0.0.1:$port")
    redis_up "$port" --cluster-enabled yes --cluster-config-file "nodes-$port.conf"
  done
  redis-cli --cluster create "${ports[@]}" --cluster-yes >"$WORK/cluster.log" 2>&1
  for _ in $(seq 300); do
    local ok=0
    for i in 1 2 3; do
      redis-cli -p $((REDIS_PORT + i)) CLUSTER INFO | grep -q 'cluster_state:ok' && ok=$((ok + 1))
    done
    [ "$ok" = 3 ] && return
    sleep 0.05
  done
  echo "the cluster did not come up" >&2; cat "$WORK/cluster.log" >&2; exit 1
}

masters() { # the ports of the topology's masters
  if [ "$1" = single ]; then echo "$REDIS_PORT"; else
    echo "$((REDIS_PORT + 1)) $((REDIS_PORT + 2)) $((REDIS_PORT + 3))"; fi
}

store_flags() { # the serve flags that reach the topology's store
  if [ "$1" = single ]; then echo "--redis redis://127.0.0.1:$REDIS_PORT"; else
    echo "--redis-cluster redis://127.0.0.1:$((REDIS_PORT + 1)),redis://127.0.0.1:$((REDIS_PORT + 2)),redis://127.0.0.1:$((REDIS_PORT + 3))"
  fi
}

write_config() { # write_config LIMIT [BATCH_MAX/IN_FLIGHT]
  local batching=${2:-1/1}
  cat >"$WORK/config.toml" <<TOML
[[plans.default]]
name = "1h"
policy = "sliding-window"
limit = $1
window = "1h"

[store]
failure_policy = "fail-closed"
timeout = "1s"
batch_max = ${batching%/*}
batches_in_flight = ${batching#*/}
TOML
}

fleet_up() { # fleet_up N TOPOLOGY
  SERVE_PIDS=()
  local addresses=() port
  for i in $(seq 0 $(($1 - 1))); do
    port=$((SERVE_PORT + i)); addresses+=("127.0.0.1:$port")
    # shellcheck disable=SC2046
    (on_cpus "$CLIENT_CPUS" "$BIN" serve --config "$WORK/config.toml" --listen "127.0.0.1:$port" \
      --grpc-listen off $(store_flags "$2")) >"$WORK/serve$i.out" 2>"$WORK/serve$i.err" &
    SERVE_PIDS+=($!)
  done
  for address in "${addresses[@]}"; do
    for _ in $(seq 100); do
      curl -fs "http://$address/healthz" >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
  FLEET=$(IFS=,; echo "${addresses[*]}")
}

serve_cpu_us() { # CPU time (user + system) of the running servers, in µs
  local total=0 pid ticks
  for pid in "${SERVE_PIDS[@]}"; do
    ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    total=$((total + ticks))
  done
  echo $((total * 1000000 / $(getconf CLK_TCK)))
}

redis_cpu_us() { # CPU time (user + system) of the topology's masters, in µs
  local port total=0
  for port in $(masters "$1"); do
    total=$((total + $(redis-cli -p "$port" INFO cpu | tr -d '\r' |
      awk -F: '/^used_cpu_(sys|user):/ {t += $2} END {printf "%d", t * 1000000}')))
  done
  echo "$total"
}

fleet_down() {
  for pid in "${SERVE_PIDS[@]}"; do kill -TERM "$pid"; wait "$pid" || true; done
  SERVE_PIDS=()
}

redis_calls() { # the scripts called, summed over the masters
  # INFO commandstats also counts the commands a script runs (GET, SET,
  # TIME, ...): only the calls a client sends count here.
  local total=0 port n
  for port in $(masters "$1"); do
    n=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' |
      grep -E '^cmdstat_(evalsha|eval|script\|load):' |
      sed -n 's/^cmdstat_[^:]*:calls=\([0-9]*\),.*/\1/p' | awk '{s += $1} END {print s + 0}')
    total=$((total + n))
  done
  echo "$total"
}

reset_redis() {
  local port
  for port in $(masters "$1"); do
    redis-cli -p "$port" FLUSHALL >/dev/null
    redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
  done
}

connections_for() { # connections_for N: the load generator's connections for N servers
  if [ -n "$CONNECTIONS_PER_SERVER" ]; then echo $((CONNECTIONS_PER_SERVER * $1)); else echo "$CONNECTIONS"; fi
}

run() { # run TOPOLOGY WORKLOAD N BATCHING
  local limit=100 load_flags="--clients 10000"
  if [ "$2" = abusive ]; then
    limit=$((REQUESTS / 2 / 100 / 50)); [ "$limit" -ge 1 ] || limit=1
    load_flags="--clients 10000 --abusers 100 --abuser-share 0.5"
  fi
  write_config "$limit" "$4"
  reset_redis "$1"
  fleet_up "$3" "$1"
  local serve_before redis_before; serve_before=$(serve_cpu_us); redis_before=$(redis_cpu_us "$1")
  # shellcheck disable=SC2086
  line=$(on_cpus "$CLIENT_CPUS" "$LOAD" --servers "$FLEET" --requests "$REQUESTS" --connections "$(connections_for "$3")" \
    --limit "$limit" $load_flags)
  local serve_cpu redis_cpu
  serve_cpu=$(($(serve_cpu_us) - serve_before)); redis_cpu=$(($(redis_cpu_us "$1") - redis_before))
  fleet_down
  local calls; calls=$(redis_calls "$1")
  echo "$line" | awk -v topo="$1" -v work="$2" -v n="$3" -v batching="$4" -v calls="$calls" \
    -v serve_cpu="$serve_cpu" -v redis_cpu="$redis_cpu" '{
    for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    printf "| %s | %s | %d | %s | %s | %s | %s | %.3f | %.1f | %.1f | %s / %s | %s | %s |\n",
      topo, work, n, batching, v["rate"], v["p50_ms"], v["p99_ms"], calls / v["requests"],
      redis_cpu / v["requests"], serve_cpu / v["requests"],
      v["most_allowed_per_client"], v["limit"], v["clients_over_limit"], v["decided_by"]
  }'
}

ceiling() { # ceiling TOPOLOGY: redis-benchmark with a real call's EVALSHA
  write_config 100
  reset_redis "$1"
  fleet_up 1 "$1"
  local port; port=$(masters "$1" | cut -d' ' -f1)
  : >"$WORK/monitor.txt"
  local monitors=() p
  for p in $(masters "$1"); do
    redis-cli -p "$p" MONITOR >>"$WORK/monitor.txt" &
    monitors+=($!)
  done
  sleep 0.3 # MONITOR has no "subscribed" reply to wait for
  curl -fs -X POST -H 'Content-Type: application/json' -d '{"client":"cBENCH","cost":1}' \
    "http://$FLEET/v1/check" >/dev/null
  for _ in $(seq 100); do grep -qi '"evalsha"' "$WORK/monitor.txt" && break; sleep 0.02; done
  for p in "${monitors[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
  fleet_down
  # The captured EVALSHA, with the client made random, the deadline far
  # away, and each call a decision of its own, as the servers' are: a
  # receipt id of its own (the captured one, sent again for a client, would
  # be answered from the receipt that client's first call left, without
  # deciding or writing: 9 calls in 10 at 10 calls per client), and a
  # watermark above every id, so that each call drops its client's earlier
  # receipt, as a server's calls do once they are answered.
  python3 - "$1" "$WORK/monitor.txt" >"$WORK/evalsha.args" <<'PY'
import shlex, sys
cluster = sys.argv[1] == "cluster"
for line in open(sys.argv[2]):
    if '"EVALSHA"' not in line and '"evalsha"' not in line:
        continue
    words = shlex.split(line.split("]", 1)[1])
    numkeys = int(words[2])
    words[3 + numkeys + 3] = "9000000000000000"  # ARGV[4], the deadline (µs, < 2^53)
    receipt, watermark = len(words) - 2, len(words) - 1  # plan.lua's last two ARGV
    words[receipt] = words[receipt].split(":")[0] + ":__rand_int__"
    words[watermark] = "9000000000000000"
    tag = "{tag}c__rand_int__" if cluster else "{c:c__rand_int__}"
    print(" ".join(shlex.quote(w.replace("{c:cBENCH}", tag)) for w in words))
    break
PY
  local cluster_flag="" conns pipeline n total first=${SERVERS%% *}
  [ "$1" = cluster ] && cluster_flag="--cluster"
  for n in $SERVERS; do
    total=$(connections_for "$n")
    # As many connections as the load generator opens, one call each in
    # flight (once for a fixed CONNECTIONS); then as the n servers'
    # multiplexed connections (one each to one Redis; one to each of the 3
    # masters of a cluster, which redis-benchmark --cluster also needs at
    # least), that many calls deep in all.
    if [ -n "$CONNECTIONS_PER_SERVER" ] || [ "$n" = "$first" ]; then
      evalsha_ceiling "$port" "$total" 1 $cluster_flag
    fi
    conns=$n; [ "$1" = cluster ] && conns=$((n * 3))
    pipeline=$(( (total + conns - 1) / conns ))
    evalsha_ceiling "$port" "$conns" "$pipeline" $cluster_flag
  done
}

evalsha_ceiling() { # evalsha_ceiling PORT CONNECTIONS PIPELINE [--cluster]: one redis-benchmark line
  printf '%s connections, pipeline %s: ' "$2" "$3"
  # shellcheck disable=SC2046
  eval on_cpus "'$CLIENT_CPUS'" redis-benchmark -p "$1" ${4:-} -c "$2" -P "$3" -n "$REQUESTS" \
    -r 10000 -q $(cat "$WORK/evalsha.args") | tr '\r' '\n' |
    grep -E 'requests per second' | tail -1 | sed 's/.*: \([0-9.]* requests per second\)/\1/'
}

echo "machine: $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "$REDIS_CPUS$CLIENT_CPUS" ] && echo "pinned: Redis on cores ${REDIS_CPUS:-any}, servers, load generator and redis-benchmark on ${CLIENT_CPUS:-any}"
if [ -n "$CONNECTIONS_PER_SERVER" ]; then
  echo "REQUESTS=$REQUESTS CONNECTIONS_PER_SERVER=$CONNECTIONS_PER_SERVER (the load generator opens $CONNECTIONS_PER_SERVER x N)"
else
  echo "REQUESTS=$REQUESTS CONNECTIONS=$CONNECTIONS"
fi
for topology in $TOPOLOGIES; do
  if [ "$topology" = single ]; then redis_up "$REDIS_PORT"; else cluster_up; fi
  echo
  echo "== $topology: redis-benchmark EVALSHA ceiling"
  ceiling "$topology"
  echo
  echo "| store | workload | servers | batch max/in flight | decisions/s | p50 ms | p99 ms | Redis calls/decision | Redis CPU µs/decision | serve CPU µs/decision | most allowed / limit | clients over | decided by |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  batchings=$BATCHING
  for workload in spread abusive; do
    for n in $SERVERS; do
      for batching in $batchings; do run "$topology" "$workload" "$n" "$batching"; done
    done
  done
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
