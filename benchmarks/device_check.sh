#!/usr/bin/env bash
# What the lent machine (one NVIDIA H100/H200, 16 CPU cores, 15 minutes in all) has to measure, as one prepared
# script in two parts, each ending within 6 minutes on its own:
#   bash benchmarks/device_check.sh OUT [gpu|cores]
#
# gpu    benchmarks/gpu_check.py (correctness; resident HOGWILD! on the MLP from 1 worker to the resident maximum;
#        HOGWILD! to ε on the GPU and on the host's CPU cores, backend cpu, one thread a core up to 16, same
#        scenario; each cell's gradient spread), `simasgd calibrate --gpu`, PyTorch's GPU HOGWILD! anchor at equal
#        workers, then the streams 1-32, the CNN, the other resident algorithms and the Lopez table within what is
#        left. Writes OUT/gpu.log, OUT/gpu_check_<gpu>.json (one gpu_check record, the processes' parts merged, the
#        status lines under `device_check`), OUT/torch_anchor_<gpu>.json, OUT/gpu_profile_<gpu>.toml: the names
#        they take in benchmarks/results/.
# cores  the topology (lscpu, numactl --hardware, /sys/devices/system/node) into OUT/topology.txt;
#        benchmarks/many_cores.py (mutex, HOGWILD!, Leashed-SGD persistence 1, Lopez at 1-16 threads: the
#        corpus entry OUT/<machine>.json.gz, for corpus/; scored later, off the machine: simasgd corpus score);
#        benchmarks/contention.py --beside --cycle --timeshare --held --sharers (k threads updating one θ; the lock's copy
#        and update with k - 1 spinning; then the same two steps taken in turn while the other k - 1 threads
#        compute the MLP's gradients, each gradient timed; then the mutex executor's cycle, its two holds and the
#        hand-offs timed apart; then gradients with 1, 2, 4, 8 threads sharing one CPU, B = 16 and 64, 3 passes
#        of 0.5 s a k; then [coherence]'s rows at θ's size, the lock workers' mirrored update of lines another
#        core read among them: OUT/contention_<machine>.json, ~70 s on 16 cores);
#        Ek's UMA-vs-NUMA cell measured (device_check.py ek-cells, beside benchmarks/ek_numa.py's simulated one:
#        OUT/ek_numa_<machine>.json) only where the machine has two NUMA nodes; `simasgd calibrate --network`
#        (with the server loop under 1, 2, 4, 7 senders: [network.server_loop.by_senders] in the profile, a line
#        per N in cores.log; benchmarks/README_dist.md says how it is read), benchmarks/dist_idle_gap.py (the
#        server loop with each worker busy 0-1000 µs before its push: OUT/idle_gap_<machine>.json), then
#        benchmarks/dist_fidelity.py at 2, 4 and 8 processes (param_server with 1 and 2 shards, easgd, eawild,
#        keuper, sync), rank r pinned to a core of its own, 3 runs of 2,000 updates.
#        Writes OUT/cores.log, OUT/topology.txt, OUT/<machine>.json.gz, OUT/contention_<machine>.json,
#        OUT/idle_gap_<machine>.json, OUT/cores-files.tar.gz (the cells' results folders, the profile,
#        many_cores' table) and, with two NUMA nodes, OUT/ek_numa_<machine>.json.
#
# With no part named it runs the first part whose records are not in the repository (benchmarks/device_check.py
# says which and why): gpu when there is a GPU and benchmarks/results/gpu_check_<gpu>.json (<gpu>: h100, h200,
# the first word with a digit of the GPU's name) was not written by this script's gpu part; else cores when
# corpus/<machine>.json.gz (many_cores.py's name: CPU family and CPU count, e.g. amd_epyc_16cpu) or
# benchmarks/results/contention_<machine>.json is absent or lacks its beside, cycle, timeshare, held or sharers
# table, or
# benchmarks/results/idle_gap_<machine>.json is absent, or no benchmarks/results/dist_fidelity_<machine>*.md names
# a wake timed at three gaps or more in its [network]: line (then calibrate_network and dist_fidelity; the entry being in, those sections
# alone run, as with DEVICE_CHECK_ONLY=contention,idle_gap); else nothing (exit 0). So one
# lending runs `device_check.sh OUT gpu` and `device_check.sh OUT2 cores` (two commands: one command may run
# 10 minutes), and a part whose section failed is run again alone.
#
# Sections run in priority order, each under `timeout` within what is left of the part's deadline
# (DEVICE_CHECK_DEADLINE, 330 s; a section's processes are killed 10 s after its timeout), and each prints one
# line: `[status] NAME: ok (S s)`, `[status] NAME: failed (rc N, S s)` or `[status] NAME: skipped (why)`; the
# details go to OUT/<part>.log. Exit status 1 if a section failed, else 0. At most 8 files under OUT a part.
#
# Environment: PYTHON (default python3; simasgd runs from this checkout, PYTHONPATH=$PWD; packages the machine
# lacks can travel as wheels in .whl/, installed into /tmp/site first: benchmarks/device_wheels.sh builds that
# folder here; numpy's removed row_stack is aliased there for numba-cuda), DEVICE_CHECK_TINY=1 (the rehearsal of
# tests/test_device_check.py: numba's CUDA simulator and gpu_check.py --tiny, the anchor on the CPU; 1-2 threads,
# mutex only, calibrate --network --quick, 2 processes, 1 run), DEVICE_CHECK_ONLY=a,b (only these sections: the
# others say skipped), DEVICE_CHECK_EK=1 (Ek's cell even on one NUMA node), DEVICE_CHECK_SLOW=F (with
# DEVICE_CHECK_TINY only: every section's cap and the default deadline F times the lent machine's, an integer;
# the rehearsal on a loaded host, where the caps, which are that machine's budget, do not apply).
set -uo pipefail
usage="usage: device_check.sh OUT [gpu|cores]"
OUT=${1:?$usage}
PART=${2:-}
case "$PART" in ""|gpu|cores) ;; *) echo "$usage" >&2; exit 2 ;; esac
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || { echo "$usage: cannot create $OUT" >&2; exit 2; }
cd "$(dirname "$0")/.." || exit 2
START=$(date +%s)
PY=${PYTHON:-python3}
TINY=${DEVICE_CHECK_TINY:-0}
[ "$TINY" = 0 ] && TINY=
SLOW=1
[ -n "$TINY" ] && SLOW=${DEVICE_CHECK_SLOW:-1}
case "$SLOW" in ""|0|*[!0-9]*) echo "DEVICE_CHECK_SLOW=$SLOW: a positive integer" >&2; exit 2 ;; esac
DEADLINE=${DEVICE_CHECK_DEADLINE:-$(( 330 * SLOW ))}
ONLY=${DEVICE_CHECK_ONLY:-}
GRACE=10
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
[ -n "$TINY" ] && export NUMBA_ENABLE_CUDASIM=1
PRELOG=$(mktemp)
trap 'rm -f "$PRELOG"' EXIT

if compgen -G ".whl/*.whl" >/dev/null; then
  timeout 120 $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl >>"$PRELOG" 2>&1 && export PYTHONPATH=/tmp/site:$PWD
fi
# numba-cuda 0.30 calls np.row_stack, which numpy 2.5 removed: every kernel launch fails without this alias
if ! timeout 60 $PY -c "import numpy; numpy.row_stack" >/dev/null 2>&1; then
  mkdir -p /tmp/site && printf '%s\n' 'import numpy as _np' 'if not hasattr(_np, "row_stack"):' \
    '    _np.row_stack = _np.vstack' >/tmp/site/sitecustomize.py && export PYTHONPATH=/tmp/site:$PWD \
    && echo "numpy without row_stack: aliased to vstack for numba-cuda (/tmp/site/sitecustomize.py)" >>"$PRELOG"
fi
if [ -z "$PART" ]; then
  DUE=$(timeout 60 $PY benchmarks/device_check.py pending 2>>"$PRELOG")
  sed 's/^/  /' "$PRELOG" | tail -n 5
  PART=${DUE%%:*}
  case "$PART" in
    gpu|cores) echo "[device_check] no part named: the $PART part is due"
               if [ "$DUE" != "$PART" ] && [ -z "$ONLY" ]; then  # "cores:contention": the rest is in
                 ONLY=${DUE#*:}
                 echo "[device_check] of it only $ONLY: the rest is in the repository (as DEVICE_CHECK_ONLY=$ONLY)"
               fi ;;
    none) echo "[device_check] nothing due: both parts' records are in the repository; name a part to rerun it"
          exit 0 ;;
    *) echo "[device_check] cannot tell which part is due (benchmarks/device_check.py pending failed)"; exit 2 ;;
  esac
fi

LOG=$OUT/$PART.log
WORK=$OUT/work-$PART  # bundled or removed at the end
STATUS=$WORK/status.txt
rm -rf "$WORK" && mkdir -p "$WORK"
{ echo "device_check.sh $PART, $(date -u +%FT%TZ), deadline $DEADLINE s${TINY:+, tiny}$([ "$SLOW" -gt 1 ] && echo ", caps x$SLOW")"
  cat "$PRELOG"; } >"$LOG"
export OUT WORK PY TINY

left() { echo $(( DEADLINE - ($(date +%s) - START) )); }
say() { echo "$*" | tee -a "$LOG"; }
status() { local line="[status] $1: $2 ($3)"; echo "$line" >>"$STATUS"; say "$line"; }
RC=0
# section NAME NEED_S CAP_S COMMAND...: run COMMAND for at most CAP_S seconds and what is left of the deadline,
# if at least NEED_S are (NEED_S "always": CAP_S whatever is left, and DEVICE_CHECK_ONLY does not apply: the
# part's set-up and its record); RC is its exit status, -1 where it was skipped
section() {
  local name=$1 need=$2 cap=$(( $3 * SLOW )) l t t0
  shift 3
  RC=0
  if [ "$need" = always ]; then
    t=$cap
  else
    if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then
      status "$name" skipped "not in DEVICE_CHECK_ONLY"; RC=-1; return
    fi
    l=$(( $(left) - GRACE ))
    if [ "$l" -lt "$need" ] || [ "$l" -lt 1 ]; then
      status "$name" skipped "deadline: $(left) s left, needs ~$need"; RC=-1; return
    fi
    t=$(( cap < l ? cap : l ))
  fi
  t0=$(date +%s)
  echo "=== $name (timeout $t s) $(date -u +%T)" >>"$LOG"
  SECTION_S=$t timeout -k "$GRACE" "$t" "$@" >>"$LOG" 2>&1
  RC=$?
  if [ "$RC" -eq 0 ]; then
    status "$name" ok "$(( $(date +%s) - t0 )) s"
  else
    local last
    last=$(tail -n 4 "$LOG" | cut -c1-200 | sed 's/^/    /')
    status "$name" failed "rc $RC, $(( $(date +%s) - t0 )) s"
    echo "$last"
  fi
}
have_torch() { timeout 60 $PY -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)" >/dev/null 2>&1; }
numa_nodes() {
  local n=0 d
  for d in /sys/devices/system/node/node[0-9]*; do
    [ -n "$(tr -d '[:space:]' <"$d/cpulist" 2>/dev/null)" ] && n=$(( n + 1 ))
  done
  echo $(( n > 0 ? n : 1 ))
}
ncpus() { $PY -c "import os; print(len(os.sched_getaffinity(0)))" 2>/dev/null || nproc; }
# the values of "$@" no larger than $1... (CPUs): "1 2 4 8 16" on 16 CPUs, "1 2 4" on 4
at_most() { local cap=$1 x out=(); shift; for x in "$@"; do [ "$x" -le "$cap" ] && out+=("$x"); done; echo "${out[*]}"; }

# --------------------------------------------------------------------------- gpu part
step_env() {  # the GPU (numba's simulator with DEVICE_CHECK_TINY) and the versions, or rc 1
  if [ -n "$TINY" ]; then echo "tiny: numba's CUDA simulator"; else nvidia-smi || return 1; fi
  $PY -c "import numpy, numba; from executors.cuda import device; print('numpy', numpy.__version__, 'numba',
numba.__version__, device.describe())"
}
step_gpu_check() {  # PART_NAME SECTIONS: gpu_check.py ends its sections 20 s before the section's timeout
  $PY benchmarks/gpu_check.py --out "$WORK/$1" --deadline $(( SECTION_S > 40 ? SECTION_S - 20 : 20 )) \
    --sections "$2" ${TINY:+--tiny}
}
step_anchor() {
  if [ -n "$TINY" ]; then
    $PY benchmarks/torch_gpu_anchor.py --device cpu --workers 2 --layers 20,8,3 --batch 4 --seconds 0.5 \
      --warmup 2 --samples 500 --setup-timeout 120 --stop-timeout 30 --out "$WORK/anchor"
  else
    $PY benchmarks/torch_gpu_anchor.py --device cuda --workers 1,8,32 --batch 16 --seconds 2 --out "$WORK/anchor"
  fi && mv "$WORK/anchor/torch_anchor.json" "$OUT/torch_anchor_$KIND.json"
}
step_calibrate_gpu() {
  rm -f "$OUT/gpu_profile_$KIND.toml"
  $PY -m simasgd.cli calibrate --gpu --out "$OUT/gpu_profile_$KIND.toml"
}
gpu_check_part() {  # NAME SECTIONS NEED CAP: one gpu_check.py process, then a status line per section of it
  section "$1" "$3" "$4" bash -c "step_gpu_check $1 $2"
  [ "$RC" -lt 0 ] && return
  $PY benchmarks/device_check.py gpu-status "$WORK/$1" "$2" "$RC" 2>>"$LOG" | while IFS= read -r line; do
    echo "$line" >>"$STATUS"; say "$line"
  done
}
gpu_part() {
  KIND=$(timeout 60 $PY benchmarks/device_check.py gpu-kind 2>>"$LOG")
  [ -n "$TINY" ] && [ "$KIND" = none ] && KIND=cudasim
  export KIND
  say "gpu: $KIND"
  export -f step_env step_gpu_check step_anchor step_calibrate_gpu
  section env always 90 bash -c step_env
  if [ "$RC" -ne 0 ]; then
    for s in gpu_check_a calibrate_gpu torch_anchor gpu_check_b record; do status "$s" skipped "env failed: no GPU"; done
    return
  fi
  # 1. correctness, the main table, HOGWILD! to ε on the GPU and on the host's cores
  gpu_check_part gpu_check_a gradients,constant,hogwild_mlp,to_eps,to_eps_cpu 60 200
  # 2. the [gpu] and [gpu.block] tables of the simulator's GPU model
  section calibrate_gpu 30 90 bash -c step_calibrate_gpu
  # 3. PyTorch's GPU HOGWILD! at equal workers
  if have_torch; then section torch_anchor 30 75 bash -c step_anchor; else status torch_anchor skipped "no torch"; fi
  # 4. the rest, in priority order, within what is left
  gpu_check_part gpu_check_b streams,hogwild_cnn,algorithms_mlp,lopez_table 45 600
  # the record: the processes' parts as one (whatever the deadline: a few seconds)
  if compgen -G "$WORK/gpu_check_[ab]/gpu_check.json" >/dev/null; then
    section record always 30 $PY benchmarks/device_check.py merge-gpu \
      --out "$OUT/gpu_check_$KIND.json" --status "$STATUS" ${TINY:+--tiny} --gpu "$KIND" --deadline "$DEADLINE" \
      "$WORK/gpu_check_a" "$WORK/gpu_check_b"
    [ "$RC" -eq 0 ] && rm -rf "$WORK/gpu_check_a" "$WORK/gpu_check_b"
  else
    status record skipped "no gpu_check.py process ran"
  fi
  rm -rf "$WORK/anchor"
}

# --------------------------------------------------------------------------- cores part
step_topology() {
  local f=$OUT/topology.txt d
  { echo "# $(hostname), $(date -u +%FT%TZ), CPUs of this process: $(ncpus)"
    echo; echo "## lscpu"; lscpu || echo "(no lscpu)"
    echo; echo "## numactl --hardware"
    if command -v numactl >/dev/null; then numactl --hardware 2>&1; else echo "(no numactl)"; fi
    echo; echo "## /sys/devices/system/node"
    for d in /sys/devices/system/node/node[0-9]*; do
      echo "$(basename "$d"): cpus $(cat "$d/cpulist" 2>/dev/null), distance $(cat "$d/distance" 2>/dev/null)," \
        "$(grep -h MemTotal "$d/meminfo" 2>/dev/null | awk '{print $(NF-1), $NF}')"
    done
    echo; echo "## lscpu --extended"; lscpu --extended 2>&1 || true
  } >"$f"
  cat "$f"
}
step_many_cores() {
  local threads
  if [ -n "$TINY" ]; then
    $PY benchmarks/many_cores.py "$WORK/many_cores" --threads 1 2 --algorithms mutex --max-updates 60 \
      --max-time-s 2 --no-score
  else
    read -r -a threads <<<"$(at_most "$(ncpus)" 1 2 4 8 16)"
    $PY benchmarks/many_cores.py "$WORK/many_cores" --threads "${threads[@]}" --max-updates 2000 --max-time-s 5 \
      --no-score
  fi
}
step_contention() {  # k threads on one θ: concurrent updates, the lock's copy-and-update; then beside gradients
  local threads
  if [ -n "$TINY" ]; then
    $PY benchmarks/contention.py --out "$OUT/contention_$MACHINE.json" --threads 1 2 --passes 12 --dim 4096 \
      --beside --beside-passes 12 --cycle --cycles 12 --layers 64 8 10 \
      --timeshare --timeshare-threads 1 2 --timeshare-s 0.1 --timeshare-repeats 1 --timeshare-batch 16 \
      --held --held-s 0.2 --sharers --sharers-rounds 8
  else
    read -r -a threads <<<"$(at_most "$(ncpus)" 1 2 4 8 16)"
    $PY benchmarks/contention.py --out "$OUT/contention_$MACHINE.json" --threads "${threads[@]}" \
      --beside --beside-passes 1000 --cycle --cycles 300 --timeshare --timeshare-s 0.5 --timeshare-repeats 3 \
      --held --sharers
  fi
}
step_idle_gap() {  # the server loop with each worker busy before its push: a round trip after a wait
  if [ -n "$TINY" ]; then
    $PY benchmarks/dist_idle_gap.py --senders 1 --gaps-us 0 250 --rounds 20 --out "$OUT/idle_gap_$MACHINE.json"
  else
    $PY benchmarks/dist_idle_gap.py --senders 1 2 4 7 --gaps-us 0 250 550 1000 --out "$OUT/idle_gap_$MACHINE.json"
  fi
}
step_salvage() {  # the cells measured before many_cores.py was cut, as the entry it would have written
  compgen -G "$WORK/many_cores/cells/*/cpu/summary.json" >/dev/null || { echo "no measured cell"; return 1; }
  $PY -m simasgd.cli corpus add "$WORK/many_cores/cells" --profile "$WORK/many_cores/this.toml" \
    --machine "$MACHINE" --corpus "$WORK/many_cores/corpus"
}
step_ek() {
  if [ -n "$TINY" ]; then
    $PY benchmarks/device_check.py ek-cells "$WORK/ek" --threads 2 --algorithms hogwild --updates 60 --samples 1000
  else
    read -r -a threads <<<"$(at_most "$(ncpus)" 7 8)"
    $PY benchmarks/device_check.py ek-cells "$WORK/ek" --threads "${threads[@]}" --updates 2000
  fi
}
step_network() { $PY -m simasgd.cli calibrate --network --out "$PROFILE" ${TINY:+--quick}; }
step_dist() {
  if [ -n "$TINY" ]; then
    $PY benchmarks/dist_fidelity.py --profile "$PROFILE" --processes 2 --repeats 1 --pin
  else
    $PY benchmarks/dist_fidelity.py --profile "$PROFILE" --processes "$(at_most "$(ncpus)" 2 4 8 | tr ' ' ,)" \
      --repeats 3 --pin --algorithms all --updates 2000 --out "$WORK/dist_fidelity"  # start-up under 5% of a run
  fi
}
cores_part() {
  MACHINE=$(timeout 60 $PY benchmarks/device_check.py machine 2>>"$LOG")
  [ -n "$MACHINE" ] || MACHINE=unknown
  PROFILE=$WORK/many_cores/this.toml  # many_cores.py calibrates it; calibrate --network adds [network]
  mkdir -p "$WORK/many_cores"
  export MACHINE PROFILE SIMASGD_JOBS=1  # the simulated repeats in the measuring process: no pool to spawn
  export -f step_topology step_many_cores step_contention step_salvage step_ek step_network step_idle_gap step_dist \
    ncpus at_most
  say "machine: $MACHINE, $(ncpus) CPUs, $(numa_nodes) NUMA nodes"
  section topology 0 30 bash -c step_topology
  section many_cores 60 230 bash -c step_many_cores
  if [ "$RC" -gt 0 ]; then section many_cores_salvage 10 60 bash -c step_salvage; fi
  compgen -G "$WORK/many_cores/corpus/*.json.gz" >/dev/null && mv "$WORK"/many_cores/corpus/*.json.gz "$OUT/"
  rmdir "$WORK/many_cores/corpus" 2>/dev/null
  section contention 30 120 bash -c step_contention
  if [ "$(numa_nodes)" -ge 2 ] || [ "${DEVICE_CHECK_EK:-0}" = 1 ]; then
    section ek_numa 30 120 bash -c step_ek
    [ -f "$WORK/ek/ek_numa_measured.json" ] && mv "$WORK/ek/ek_numa_measured.json" "$OUT/ek_numa_$MACHINE.json"
  else
    status ek_numa skipped "$(numa_nodes) NUMA node: Ek's cell needs two"
  fi
  if have_torch; then  # the dist backend is torch.distributed's
    section calibrate_network 20 60 bash -c step_network
    section idle_gap 20 90 bash -c step_idle_gap
    section dist_fidelity 30 600 bash -c step_dist
  else
    status calibrate_network skipped "no torch"
    status idle_gap skipped "no torch"
    status dist_fidelity skipped "no torch"
  fi
}

say "device_check.sh $PART: deadline $DEADLINE s, $(left) s left${TINY:+ (tiny)}"
if [ "$PART" = gpu ]; then gpu_part; else cores_part; fi

N=$(grep -c ': ok (' "$STATUS")
F=$(grep -c ': failed (' "$STATUS")
S=$(grep -c ': skipped (' "$STATUS")
# the rest of the work folder as one file (the largest under 16 MiB: the simulated runs' folders first to go)
rm -f "$STATUS"
if [ -n "$(find "$WORK" -type f -print -quit)" ]; then
  TAR=$OUT/$PART-files.tar.gz
  tar -czf "$TAR" -C "$WORK" . 2>>"$LOG"
  if [ "$(stat -c %s "$TAR")" -ge $(( 16 * 1024 * 1024 )) ]; then
    say "$(basename "$TAR"): $(( $(stat -c %s "$TAR") >> 20 )) MiB; without the simulated runs' folders"
    tar -czf "$TAR" -C "$WORK" --exclude='*/sim' --exclude='*.parquet.prev' . 2>>"$LOG"
  fi
  if [ "$(stat -c %s "$TAR")" -ge $(( 16 * 1024 * 1024 )) ]; then
    say "$(basename "$TAR"): still $(( $(stat -c %s "$TAR") >> 20 )) MiB; without the updates tables"
    tar -czf "$TAR" -C "$WORK" --exclude='*/sim' --exclude='updates.parquet' . 2>>"$LOG"
  fi
fi
rm -rf "$WORK"
say "[device_check] $PART: $N ok, $F failed, $S skipped in $(( $(date +%s) - START )) s; files: $(ls "$OUT" | tr '\n' ' ')"
exit $(( F > 0 ))
