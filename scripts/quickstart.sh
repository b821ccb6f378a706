#!/usr/bin/env bash
# Set up rewindow in ./.venv and replay generated sample history.
# Needs only Python 3.11 and Java 17.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
echo "installing rewindow into .venv (log: .venv/install.log) ..."
if ! { .venv/bin/python -m pip install --upgrade pip && .venv/bin/python -m pip install -e ".[test]"; } > .venv/install.log 2>&1; then
  tail -n 40 .venv/install.log
  exit 1
fi
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m orchestration.demo "$@"
