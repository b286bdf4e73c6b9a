#!/usr/bin/env bash
# One-time set-up used by `make demo` and `make test`: a virtual environment with
# loadkit and its dependencies (including the real tritonserver binary from the
# nvidia-pytriton wheel), plus Debian's Chromium for the report screenshot test and
# Debian's Prometheus, node-exporter and Alertmanager for the `import --prometheus` and
# `oncall` tests (--with-prometheus).
# What is missing is installed side by side (Debian's packages, MLServer's venv and
# loadkit's venv at once): on a fresh 2-core machine the three mostly wait on the network.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
  echo "ERROR: loadkit needs Python 3.11 (the bundled Triton Python backend stub is built for it)" >&2
  echo "HINT: install python3.11 and run again, or set PYTHON=/path/to/python3.11" >&2
  exit 2
fi

with_browser=0
with_mlserver=0
with_prometheus=0
for arg in "$@"; do
  case "$arg" in
    --with-browser) with_browser=1 ;;
    --with-mlserver) with_mlserver=1 ;;
    --with-prometheus) with_prometheus=1 ;;
  esac
done

# Debian's packages the integration tests start: chromium (the report screenshot test),
# prometheus and prometheus-node-exporter (the `import --prometheus` test), and
# prometheus-alertmanager (the `oncall` test).
debian=()
if [ "$with_browser" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  debian+=(chromium)
fi
if [ "$with_prometheus" = 1 ]; then
  command -v prometheus >/dev/null 2>&1 || debian+=(prometheus)
  command -v prometheus-node-exporter >/dev/null 2>&1 || debian+=(prometheus-node-exporter)
  command -v prometheus-alertmanager >/dev/null 2>&1 || debian+=(prometheus-alertmanager)
fi

install_debian() {
  echo "Installing Debian's ${debian[*]} for the integration tests..."
  apt-get update -qq >/dev/null
  # The packages would start system-wide daemons on :9090 and :9100; the tests start
  # their own on ephemeral ports, so keep the services from starting (policy-rc.d, exit 101).
  local made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
  fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debian[@]}" >/dev/null || rc=$?
  if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
  return "$rc"
}

# MLServer, a second real KServe v2 server for the integration tests, in its own
# venv: it needs numpy 2 and its own protobuf/grpcio, loadkit pins numpy < 2.
install_mlserver() {
  echo "Installing MLServer 1.7.1 for the integration tests (.venv-mlserver)..."
  "$PY" -m venv .venv-mlserver
  install_into .venv-mlserver "mlserver==1.7.1"
}

# uv installs the same versions as pip (checked: identical `pip freeze` of both venvs) in
# a quarter of the time: a fresh clone's set-up took 40 s with pip, most of it resolving
# and unpacking on 2 cores, 15 s with uv. pip stays the fallback where uv cannot be had.
# --compile-bytecode: pip compiles what it installs, uv does not by default; where
# PYTHONDONTWRITEBYTECODE is set (as on this project's machines) every process then
# compiled its imports again, and pass 1 took 578 s instead of 410 s.
install_into() {
  local venv=$1
  shift
  if [ -x .venv/bin/uv ]; then
    .venv/bin/uv pip install -q --compile-bytecode --python "$venv/bin/python" "$@"
  else
    "$venv/bin/python" -m pip install -qq "$@"
  fi
}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if [ ! -x .venv/bin/uv ]; then
  .venv/bin/python -m pip install -qq uv || echo "NOTE: uv not installed; pip installs instead (slower)" >&2
fi

pids=()
if [ "${#debian[@]}" -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    install_debian &
    pids+=($!)
  else
    echo "NOTE: ${debian[*]} not installed; the tests that need them will be skipped" >&2
    echo "HINT: sudo apt-get install ${debian[*]}" >&2
  fi
fi
if [ "$with_mlserver" = 1 ] && [ ! -x .venv-mlserver/bin/mlserver ]; then
  install_mlserver &
  pids+=($!)
fi

stamp=.venv/.loadkit-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # Quiet: with -q pip still relays setuptools' "Editable installation" notice (an
  # editable install of a package-dir mapping, loadkit.scenarios, goes through a meta
  # path finder), which says nothing about this project; the package declaration
  # itself builds without a warning (tests/integration/test_install.py).
  install_into .venv -e ".[target,dev]"
  touch "$stamp"
fi

for pid in "${pids[@]}"; do
  wait "$pid"
done
