#!/usr/bin/env bash
# Creates .venv and installs simasgd into it (with the test extras when given `test`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if [ "${1:-}" = "test" ]; then
  # No byte-compiling at install: most of what the test extras install (torch's 700 MB above all) is never
  # imported, and compiling all of it took minutes on 2 CPUs. scripts/test.sh lets Python write the bytecode
  # of what the tests import, once.
  .venv/bin/python -m pip install -q --no-compile -e ".[test]"
else
  .venv/bin/python -m pip install -q -e .
fi
