#!/usr/bin/env bash
# Creates .venv and installs simasgd into it (with the test extras when given `test`).
# Idempotent and quick the second time: .venv/.setup holds what the last install was made from (the mode,
# pyproject.toml, this script); when nothing of it changed, pip is not run again (scripts/test.sh calls this
# first, and CI's .ci/run ran it just before). The install is editable: the sources need no reinstall.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MODE=${1:-}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
STAMP=.venv/.setup
KEY="$MODE $(cat pyproject.toml scripts/setup.sh | .venv/bin/python -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"
[ "$(cat "$STAMP" 2>/dev/null)" = "$KEY" ] && exit 0
rm -f "$STAMP"
# pip too without byte-compiling: the next pip command writes the bytecode of the modules it imports
.venv/bin/python -m pip install -q --no-compile --upgrade pip >/dev/null 2>&1 || true
if [ "$MODE" = "test" ]; then
  # No byte-compiling at install: most of what the test extras install (torch's 700 MB above all) is never
  # imported, and compiling all of it took minutes on 2 CPUs. scripts/test.sh lets Python write the bytecode
  # of what the tests import, once.
  .venv/bin/python -m pip install -q --no-compile -e ".[test]"
else
  .venv/bin/python -m pip install -q -e .
fi
echo "$KEY" >"$STAMP"
