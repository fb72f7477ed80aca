#!/usr/bin/env bash
# `tollgate proxy` against nginx with `limit_req`, side by side in one run,
# in front of the same upstream (BENCHMARKS.md, "tollgate proxy against nginx").
#
#   scripts/bench-proxy.sh
#   ROUNDS=5 DURATION=10s CONNECTIONS="32 64" WRK_THREADS=1 scripts/bench-proxy.sh
#   BASELINE=/tmp/tollgate-old scripts/bench-proxy.sh   # a third contender: another tollgate binary
#   SYSCALLS=1 scripts/bench-proxy.sh    # also system calls and context switches per request (perf stat)
#   PIN=1 scripts/bench-proxy.sh         # workers pinned: tollgate --pin-workers, nginx worker_cpu_affinity auto
#
# Both proxies decide every request per client IP address and forward it:
# nginx with `limit_req_zone $binary_remote_addr` and `limit_req ... nodelay`,
# tollgate with `--key peer` and a GCRA limit; both limits are far above what
# the benchmark reaches, so nothing is refused (the script checks for non-2xx
# answers). nginx runs as Debian packages it (installed with apt-get if
# missing), one worker process per CPU, keep-alive connections to the
# upstream; tollgate runs one worker thread per CPU (its default).
# Each round runs wrk against every contender in turn, the order flipped
# from round to round. Every process started here is stopped by its PID.
# The cpu_us column is each contender's own CPU time per request (user +
# system from /proc/PID/stat before and after the wrk run, over the requests
# wrk counted): the tollgate process (all its threads), or nginx's worker
# processes (the children of its master), so that the work of the two is
# compared in the same run, apart from wrk's and the upstream's.
# With SYSCALLS=1, each wrk run is also watched by `perf stat` (the kernel's
# tracepoints and software events, which need no hardware counters) on the
# same processes: the syscalls column is system calls per request (all of
# them, then writev/recvfrom/epoll_wait), the switches column context
# switches per request.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32 64}
WRK_THREADS=${WRK_THREADS:-1}
BASELINE=${BASELINE:-}
SYSCALLS=${SYSCALLS:-}
PIN=${PIN:-}
UPSTREAM_PORT=13100
NGINX_PORT=18183
TOLLGATE_PORT=18184
BASELINE_PORT=18185
CPUS=$(nproc)

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [ ! -x "$NGINX" ]; then
    apt-get install -y nginx-light >&2 || apt-get install -y nginx >&2
    NGINX=$(command -v nginx || echo /usr/sbin/nginx)
fi
cargo build --release -q -p tollgate-cli -p tollgate-proxy --example hello_upstream --bin tollgate >&2
BIN=target/release

DIR=$(mktemp -d /tmp/tollgate-bench-proxy.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$DIR"
}
trap cleanup EXIT

wait_for() { # wait_for PORT: until something answers HTTP there
    for _ in $(seq 100); do
        curl -fs -o /dev/null "http://127.0.0.1:$1/" && return
        sleep 0.1
    done
    echo "nothing answers on port $1" >&2
    exit 1
}

mkdir -p "$DIR/tmp"
cat >"$DIR/nginx.conf" <<EOF
worker_processes $CPUS;
${PIN:+worker_cpu_affinity auto;}
daemon off;
pid $DIR/nginx.pid;
error_log $DIR/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $DIR/tmp/body;
    proxy_temp_path $DIR/tmp/proxy;
    fastcgi_temp_path $DIR/tmp/fastcgi;
    uwsgi_temp_path $DIR/tmp/uwsgi;
    scgi_temp_path $DIR/tmp/scgi;
    # Per client IP, a rate no benchmark reaches: every request is decided and forwarded.
    limit_req_zone \$binary_remote_addr zone=perip:10m rate=1000000r/s;
    upstream backend {
        server 127.0.0.1:$UPSTREAM_PORT;
        keepalive 128;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            limit_req zone=perip burst=100000 nodelay;
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
        }
    }
}
EOF

"$BIN/examples/hello_upstream" "127.0.0.1:$UPSTREAM_PORT" >/dev/null & pids+=($!)
wait_for "$UPSTREAM_PORT"
"$NGINX" -p "$DIR" -c "$DIR/nginx.conf" -e "$DIR/error.log" & pids+=($!)
declare -A pid_of # contender -> the PID whose CPU time is counted (nginx: its master)
pid_of[nginx]=$!
start_tollgate() { # start_tollgate NAME BINARY PORT
    "$2" proxy --upstream "http://127.0.0.1:$UPSTREAM_PORT" --listen "127.0.0.1:$3" \
        --key peer --policy gcra --limit 1000000 --window 1s ${PIN:+--pin-workers} >/dev/null & pids+=($!)
    pid_of[$1]=$!
}
start_tollgate tollgate "$BIN/tollgate" "$TOLLGATE_PORT"
contenders="nginx:$NGINX_PORT tollgate:$TOLLGATE_PORT"
if [ -n "$BASELINE" ]; then
    start_tollgate baseline "$BASELINE" "$BASELINE_PORT"
    contenders="$contenders baseline:$BASELINE_PORT"
fi

# counted_pids NAME: the processes whose work is a contender's: the tollgate
# process (all threads), or nginx's workers (its master's children; the
# master itself only waits).
counted_pids() {
    local pid=${pid_of[$1]}
    if [ "$1" = nginx ]; then
        cat /proc/"$pid"/task/*/children
    else
        echo "$pid"
    fi
}

# cpu_ticks NAME: user + system clock ticks so far of a contender.
cpu_ticks() {
    for p in $(counted_pids "$1"); do
        # Fields 14 and 15 of /proc/PID/stat, counted after the ")" that
        # ends the command name (which may hold spaces).
        sed 's/.*) //' /proc/"$p"/stat | awk '{print $12 + $13}'
    done | awk '{t += $1} END {print t + 0}'
}

SYSCALL_EVENTS=raw_syscalls:sys_enter,syscalls:sys_enter_writev,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait,context-switches
if [ -n "$SYSCALLS" ]; then
    perf stat -e "$SYSCALL_EVENTS" -- true >/dev/null 2>&1 ||
        { echo "SYSCALLS=1 needs perf with the kernel's syscall tracepoints (linux-perf)" >&2; exit 1; }
fi
# per_request FILE REQUESTS: "all/writev/recvfrom/epoll_wait switches" per request.
per_request() {
    awk -F, -v n="$2" '{c[$3] = $1}
        END {printf "%.2f/%.2f/%.2f/%.2f %.2f\n", c["raw_syscalls:sys_enter"] / n,
            c["syscalls:sys_enter_writev"] / n, c["syscalls:sys_enter_recvfrom"] / n,
            c["syscalls:sys_enter_epoll_wait"] / n, c["context-switches"] / n}' "$1"
}
TICKS_PER_S=$(getconf CLK_TCK)
for c in $contenders; do
    wait_for "${c#*:}"
    wrk -t1 -c8 -d1s "http://127.0.0.1:${c#*:}/" >/dev/null # warm-up
done

# One wrk run: "rps p50_ms p99_ms non2xx requests"
run_wrk() { # run_wrk CONNECTIONS PORT
    wrk -t"$WRK_THREADS" -c"$1" -d"$DURATION" --latency "http://127.0.0.1:$2/" | awk '
        function ms(v) {
            if (v ~ /us$/) return substr(v, 1, length(v) - 2) / 1000
            if (v ~ /ms$/) return substr(v, 1, length(v) - 2) + 0
            if (v ~ /s$/) return substr(v, 1, length(v) - 1) * 1000
            return v
        }
        /Requests\/sec/ {r = $2}
        / 50%/ {p50 = ms($2)}
        / 99%/ {p99 = ms($2)}
        /Non-2xx/ {bad = $4}
        / requests in / {n = $1}
        END {printf "%.0f %.3f %.3f %d %d\n", r, p50, p99, bad, n}'
}

echo "machine: $CPUS cores; nginx $("$NGINX" -v 2>&1 | sed 's/.*\///'), $CPUS worker processes; tollgate proxy, $CPUS workers${PIN:+, both pinned to CPUs}; wrk -t$WRK_THREADS -d$DURATION"
results="$DIR/results"
for conns in $CONNECTIONS; do
    for round in $(seq "$ROUNDS"); do
        order=$contenders
        if [ $((round % 2)) -eq 0 ]; then order=$(echo "$contenders" | tr ' ' '\n' | tac | tr '\n' ' '); fi
        for c in $order; do
            load=$(cut -d' ' -f1 /proc/loadavg)
            before=$(cpu_ticks "${c%%:*}")
            if [ -n "$SYSCALLS" ]; then # counts into $DIR/perf until stopped with SIGINT
                perf stat -x, -e "$SYSCALL_EVENTS" -p "$(echo $(counted_pids "${c%%:*}") | tr ' ' ,)" \
                    -o "$DIR/perf" >/dev/null 2>&1 &
                perf_pid=$!
            fi
            read -r rps p50 p99 bad requests <<<"$(run_wrk "$conns" "${c#*:}")"
            after=$(cpu_ticks "${c%%:*}")
            cpu_us=$(awk -v t=$((after - before)) -v hz="$TICKS_PER_S" -v n="$requests" \
                'BEGIN {printf "%.1f", n ? t * 1e6 / hz / n : 0}')
            syscalls=""
            if [ -n "$SYSCALLS" ]; then
                kill -INT "$perf_pid"
                wait "$perf_pid" || true
                syscalls=" $(per_request "$DIR/perf" "$requests")"
            fi
            echo "$conns $round ${c%%:*} $rps $p50 $p99 $bad $load $cpu_us$syscalls" | tee -a "$results"
        done
    done
done | awk -v s="${SYSCALLS:+ syscalls(all/writev/recvfrom/epoll_wait) switches}" \
    'BEGIN {print "connections round contender req/s p50_ms p99_ms non-2xx load1 cpu_us" s} {print}'

echo
echo "medians over $ROUNDS rounds (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
for conns in $CONNECTIONS; do
    for c in $contenders; do
        name=${c%%:*}
        for col in 4 5 6 9; do
            awk -v n="$name" -v c="$conns" -v k="$col" '$1 == c && $3 == n {print $k}' "$results" | sort -g |
                awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
        done | paste -sd' ' | awk -v n="$name" -v c="$conns" '{printf "c=%s %-9s req/s %7.0f  p50 %.3f ms  p99 %.3f ms  cpu %.1f us/request\n", c, n, $1, $2, $3, $4}'
    done
    awk -v c="$conns" '$1 == c {rps[$2, $3] = $4}
        $1 == c && $3 == "tollgate" {rounds[$2] = 1}
        END {for (r in rounds) printf "c=%s round %s: tollgate/nginx %.2f\n", c, r, rps[r, "tollgate"] / rps[r, "nginx"]}' "$results" | sort
done
