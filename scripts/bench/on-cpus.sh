# Sourced by the benchmark scripts that pin processes to cores
# (bench-fleet.sh, bench-http.sh, bench-grpc.sh).
#
# on_cpus CPUS COMMAND...: becomes COMMAND (call it in a subshell, so that a
# background job's $! is the command's own PID), on the cores of the
# taskset list CPUS when CPUS is set, unpinned when it is empty.
on_cpus() {
  local cpus=$1; shift
  if [ -n "$cpus" ]; then exec taskset -c "$cpus" "$@"; else exec "$@"; fi
}
