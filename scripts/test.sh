#!/usr/bin/env bash
# The README's test command: set up (idempotent) and run the tests.
#   bash scripts/test.sh           the whole suite
#   bash scripts/test.sh --fast    the fast tier: every test not marked slow or hardware
# Further arguments go to pytest (e.g. a test file, -x, -k).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export MPLBACKEND=Agg
tier=()
if [ "${1:-}" = "--fast" ]; then
  shift
  tier=(-m "not slow and not hardware")
fi
exec .venv/bin/python -m pytest -q ${tier[@]+"${tier[@]}"} "$@"
