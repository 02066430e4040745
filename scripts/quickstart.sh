#!/usr/bin/env bash
# The README's main command: set up (idempotent) and run the quickstart scenario.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/simasgd run scenarios/quickstart.toml --out results/quickstart "$@"
