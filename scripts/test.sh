#!/usr/bin/env bash
# The README's test command: set up (idempotent) and run the tests.
#   bash scripts/test.sh           the whole suite
#   bash scripts/test.sh --fast    the fast tier: every test not marked slow or hardware
# Further arguments go to pytest (e.g. a test file, -x, -k; --store-durations refreshes tests/durations.json,
# the files' seconds by which the workers take the longest first).
# Tests run on every CPU (pytest-xdist, one file per worker so module fixtures compile once), except
# those marked hardware: they time this machine's threads, so they run afterwards, alone.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export MPLBACKEND=Agg
# The suite starts hundreds of Python processes: the first to import a module writes its bytecode, the rest
# read it (setup.sh installs the test extras without compiling them).
unset PYTHONDONTWRITEBYTECODE
# One worker more than the CPUs: many tests wait on processes they start (sweeps, clusters, torchrun), and
# with one a CPU the CPUs sat idle a tenth of the time. --no-loadscope-reorder: the files go out in the order
# tests/conftest.py sorted them (the longest first, by tests/durations.json), not xdist's own by test count.
PYTEST=(.venv/bin/python -m pytest -q -n "$(( $(nproc) + 1 ))" --dist loadfile --no-loadscope-reorder)
if [ "${1:-}" = "--fast" ]; then
  shift
  exec "${PYTEST[@]}" -m "not slow and not hardware" "$@"
fi
"${PYTEST[@]}" -m "not hardware" "$@"
# exit status 5: the arguments selected no hardware test
.venv/bin/python -m pytest -q -m hardware "$@" || [ $? -eq 5 ]
