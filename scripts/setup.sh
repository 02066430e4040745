#!/usr/bin/env bash
# Creates .venv and installs simasgd into it (with the test extras when given `test`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if [ "${1:-}" = "test" ]; then
  .venv/bin/python -m pip install -q -e ".[test]"
else
  .venv/bin/python -m pip install -q -e .
fi
