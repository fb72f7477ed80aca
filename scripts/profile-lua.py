#!/usr/bin/env python3
"""Where the batch script's Lua work goes, function by function.

Redis's own binary is stripped, so callgrind (scripts/bench-redis-script.py
--callgrind) counts a script's instructions but cannot say which of its Lua
functions they are for. This runs the same script, composed from a scripts
directory as src/policies.rs composes it, in a stand-alone Lua 5.1 (the
language of Redis's scripts; `apt-get install lua5.1`) on the same calls as
bench-redis-script.py's workloads, with `redis.call` and `struct.pack`
stood in for by a table in Lua. A count hook samples the Lua VM every 7
instructions, and each sample is put down to the script's function and
line that was running. It prints the script's VM instructions per
decision and each function's share of them, plus each line's with --lines N.

What it does not count: Redis's commands themselves, the C functions the
script calls (string.find, string.format: their call is one instruction
here), and Redis's conversion of arguments and replies. So it answers
"which of the script's own Lua is the most", not "what Redis spends".

  scripts/profile-lua.py [--policy t] [--decisions 3000] [--clients 300] [--batch 32] [--lines 20] DIR [DIR ...]
"""

import argparse
import collections
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench", os.path.join(HERE, "bench-redis-script.py"))
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

# Runs SCRIPT once per batch of DATA (a file returning a list of ARGVs, each
# with its KEYS[1] first), as Redis would: KEYS and ARGV set as globals,
# a fresh run of the whole chunk each time. Prints "<samples> <decisions>"
# (samples of the harness's own stand-ins included) then one
# "<line> <samples>" per line of SCRIPT that was sampled.
HARNESS = r"""
local script, data, every = arg[1], arg[2], tonumber(arg[3])
local chunk = assert(loadfile(script))
local calls = dofile(data)
local store, ttls = {}, {}
local clock_us = 1700000000000000
redis = {}
function redis.call(command, ...)
  local a = { ... }
  if command == 'TIME' then
    clock_us = clock_us + 1
    return { string.format('%d', math.floor(clock_us / 1e6)), string.format('%d', clock_us % 1e6) }
  elseif command == 'GET' then
    return store[a[1]] or false
  elseif command == 'SET' then
    store[a[1]] = a[2]
    if a[3] == 'PX' then ttls[a[1]] = tonumber(a[4]) end
    return { ok = 'OK' }
  elseif command == 'PTTL' then
    if store[a[1]] == nil then return -2 end
    return ttls[a[1]] or -1
  elseif command == 'PEXPIRE' then
    ttls[a[1]] = tonumber(a[2])
    return 1
  elseif command == 'LRANGE' then
    return store[a[1]] or {}
  elseif command == 'LLEN' then
    return #(store[a[1]] or {})
  elseif command == 'RPUSH' then
    local list = store[a[1]] or {}
    for i = 2, #a do list[#list + 1] = a[i] end
    store[a[1]] = list
    return #list
  elseif command == 'LSET' then
    store[a[1]][a[2] + 1] = a[3]
    return { ok = 'OK' }
  end
  error('profile-lua.py stands in for no ' .. command)
end
struct = { pack = function() return '' end }
local samples, total = {}, 0
debug.sethook(function()
  local info = debug.getinfo(2, 'Sl')
  if info and info.short_src == script then
    samples[info.currentline] = (samples[info.currentline] or 0) + 1
  end
  total = total + 1
end, '', every)
local decisions = 0
for _, call in ipairs(calls) do
  KEYS = { call[1] }
  ARGV = { unpack(call, 2) }
  decisions = decisions + tonumber(ARGV[2])
  local ok, err = pcall(chunk)
  if not ok then error(err) end
end
debug.sethook()
print(total, decisions)
for line, n in pairs(samples) do print(line, n) end
"""

EVERY = 7


def lua_string(value):
    return '"%s"' % str(value).replace("\\", "\\\\").replace('"', '\\"')


def functions_by_line(text):
    """The name of the function each line of `text` is in (the last one
    defined above it), by line number."""
    names, current = {}, "(top level)"
    for number, line in enumerate(text.split("\n"), 1):
        m = re.search(r"function\s+([\w.:]+)\s*\(", line)
        if m:
            current = m.group(1)
        names[number] = current
    return names


def profile(directory, args, work):
    script = os.path.join(work, "script.lua")
    data = os.path.join(work, "calls.lua")
    text = bench.compose(directory, "batch.lua")
    with open(script, "w") as f:
        f.write(text)
    shape = bench.layout(directory)
    calls, _ = bench.commands("plan", "batch", args, bench.takes_receipts(directory), shape)
    with open(data, "w") as f:
        f.write("return {\n")
        for command in calls:
            # EVALSHA sha 1 KEYS[1] ARGV...
            f.write("{%s},\n" % ",".join(lua_string(x) for x in command[3:]))
        f.write("}\n")
    out = subprocess.run(["lua5.1", os.path.join(work, "harness.lua"), script, data, str(EVERY)],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    total, decisions = (int(x) for x in out[0].split())
    lines = collections.Counter()
    for row in out[1:]:
        if row.strip():
            line, n = row.split()
            lines[int(line)] = int(n)
    return text, total, decisions, lines


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.workload_arguments(p, policy="t", decisions=3_000, clients=300, batch=32)
    p.add_argument("--top", type=int, default=15, help="functions to print")
    p.add_argument("--lines", type=int, default=0, help="also print the N most sampled lines")
    args = p.parse_args()
    args.cluster = False
    if args.batch < 2:
        sys.exit("--batch must be at least 2: this profiles batch.lua")
    with tempfile.TemporaryDirectory(prefix="profile-lua.") as work:
        with open(os.path.join(work, "harness.lua"), "w") as f:
            f.write(HARNESS)
        for d in args.dirs:
            text, total, decisions, lines = profile(d, args, work)
            names = functions_by_line(text)
            by_function = collections.Counter()
            for line, n in lines.items():
                by_function[names.get(line, "?")] += n
            in_script = sum(lines.values())
            print("%s: %.0f Lua VM instructions per decision in the script (policy %s, batches of %d); "
                  "share of them by function:" % (d, in_script * EVERY / decisions, args.policy, args.batch))
            for name, n in by_function.most_common(args.top):
                print("  %5.1f%%  %s" % (100 * n / in_script, name))
            source = text.split("\n")
            for line, n in lines.most_common(args.lines):
                print("  %5.1f%%  line %d: %s" % (100 * n / in_script, line, source[line - 1].strip()[:90]))


if __name__ == "__main__":
    main()
