#!/usr/bin/env bash
# Everything the GPU half needs measured, on one machine with an NVIDIA GPU, in one go (≤ ~7 minutes):
#   bash benchmarks/gpu_check.sh OUT_DIR [seconds]
# Writes OUT_DIR/{a,b}/gpu_check.json (benchmarks/gpu_check.py: correctness, resident and streams tables, the
# Lopez table, HOGWILD! to ε), OUT_DIR/torch_anchor.json (PyTorch's GPU HOGWILD!, same model, same GPU),
# OUT_DIR/gpu_profile.toml (simasgd calibrate --gpu) and the logs. Python packages the machine lacks can
# travel as wheels in .whl/ (installed into /tmp/site first); simasgd runs from this checkout.
set -uo pipefail
OUT=${1:?usage: gpu_check.sh OUT_DIR [seconds]}
TOTAL=${2:-390}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
START=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - START) )); }
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
$PY -c "import numpy, numba; from numba import cuda; print('numpy', numpy.__version__, 'numba', numba.__version__, 'gpu', cuda.is_available())" >> "$OUT/nvidia-smi.txt" 2>&1
# 1. correctness and the main table
timeout 150 $PY benchmarks/gpu_check.py --out "$OUT/a" --deadline 120 --sections gradients,constant,hogwild_mlp 2>&1
# 2. the PyTorch anchor at equal workers
timeout $(( $(left) < 75 ? $(left) : 75 )) $PY benchmarks/torch_gpu_anchor.py --device cuda --workers 1,8,32 \
  --batch 16 --seconds 2 --out "$OUT" 2>&1
# 3. the [gpu] and [gpu.block] tables of the simulator's GPU model (about a minute: three short backend runs)
timeout 90 $PY -m simasgd.cli calibrate --gpu --out "$OUT/gpu_profile.toml" 2>&1 | tail -20
# 4. the rest, in priority order, within what is left
R=$(( $(left) - 15 ))
[ "$R" -gt 30 ] && timeout $(( R + 15 )) $PY benchmarks/gpu_check.py --out "$OUT/b" --deadline "$R" \
  --sections streams,hogwild_cnn,algorithms_mlp,lopez_table,to_eps 2>&1
echo "gpu_check.sh: done in $(( $(date +%s) - START )) s"
