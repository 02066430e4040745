#!/usr/bin/env bash
# The README's test command: set up (idempotent) and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export MPLBACKEND=Agg
exec .venv/bin/python -m pytest -q "$@"
