#!/usr/bin/env bash
# Everything the GPU half needs measured, on one machine with an NVIDIA GPU, in one go (≤ 6 minutes): the gpu part
# of benchmarks/device_check.sh (its header says what runs, in which order, and what it writes):
#   bash benchmarks/gpu_check.sh OUT_DIR [seconds]
# seconds: the part's deadline (DEVICE_CHECK_DEADLINE, default 330). Writes OUT_DIR/gpu.log,
# OUT_DIR/gpu_check_<gpu>.json (benchmarks/gpu_check.py's sections, one record), OUT_DIR/torch_anchor_<gpu>.json
# (PyTorch's GPU HOGWILD!, same model, same GPU) and OUT_DIR/gpu_profile_<gpu>.toml (simasgd calibrate --gpu).
# Python packages the machine lacks can travel as wheels in .whl/ (installed into /tmp/site first); simasgd runs
# from this checkout.
set -uo pipefail
OUT=${1:?usage: gpu_check.sh OUT_DIR [seconds]}
DEVICE_CHECK_DEADLINE=${2:-${DEVICE_CHECK_DEADLINE:-330}} exec bash "$(dirname "$0")/device_check.sh" "$OUT" gpu
