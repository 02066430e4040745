#!/usr/bin/env bash
# The wheels the lent machine lacks, into .whl/ (git-ignored; `run` carries it with carry: [".whl"]), for
# benchmarks/device_check.sh to install into /tmp/site there. The lent machine has Python 3.12, numpy, numba
# with numba-cuda and torch, but none of simasgd's other dependencies, and it cannot reach an index.
#   bash benchmarks/device_wheels.sh [PYTHON_VERSION]     (default 3.12)
# Versions are this checkout's virtualenv's (.venv), so the device runs what the tests here ran.
set -euo pipefail
cd "$(dirname "$0")/.."
PYV=${1:-3.12}
PIP=${PIP:-.venv/bin/pip}
PKGS="pydantic pydantic_core annotated_types typing_inspection typing_extensions simpy tomli_w tomlkit
scikit_learn threadpoolctl joblib"
pins=()
for p in $PKGS; do
  v=$($PIP show "$p" 2>/dev/null | sed -n 's/^Version: //p')
  [ -n "$v" ] || { echo "device_wheels.sh: $p is not installed in .venv (bash scripts/setup.sh test first)" >&2; exit 1; }
  pins+=("$p==$v")
done
mkdir -p .whl
$PIP download -q --only-binary=:all: --no-deps --python-version "$PYV" --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d .whl "${pins[@]}"
ls .whl
