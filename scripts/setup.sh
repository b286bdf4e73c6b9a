#!/usr/bin/env bash
# One-time set-up used by `make demo` and `make test`: a virtual environment with
# loadkit and its dependencies (including the real tritonserver binary from the
# nvidia-pytriton wheel), plus Debian's Chromium for the report screenshot test.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
  echo "ERROR: loadkit needs Python 3.11 (the bundled Triton Python backend stub is built for it)" >&2
  echo "HINT: install python3.11 and run again, or set PYTHON=/path/to/python3.11" >&2
  exit 2
fi

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.loadkit-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[target,dev]"
  touch "$stamp"
fi

if [ "${1:-}" = "--with-browser" ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing Debian's chromium for the report screenshot test..."
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "NOTE: chromium is not installed; the report screenshot test will be skipped" >&2
    echo "HINT: sudo apt-get install chromium" >&2
  fi
fi
