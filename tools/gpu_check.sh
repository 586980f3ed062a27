#!/usr/bin/env bash
# The cuda target's GPU check, in one go, on a machine with an NVIDIA GPU and no internet.
#
#   tools/gpu_check.sh              # everything: build pycuda, tests on the GPU, benchmark
#   tools/gpu_check.sh --build-only # only build pycuda (also works without a GPU: a check of
#                                   # the build steps; pycuda then cannot import)
#
# Steps (each logged with its time; the summary goes to $OUT/gpu_check.json):
#   1. environment: nvidia-smi, nvcc, python, torch
#   2. pycuda from the sdist in tools/wheelhouse, its pure-Python dependencies from the wheels
#      there, installed into $SITE (no network; numpy, typing_extensions, markupsafe and a C++
#      compiler must be on the machine, as they are on the lent H200 image); the extension is
#      compiled in parallel (setup.py build_ext -j) and used in place
#   3. the cuda tests: tests/cuda (compile-only part + the GPU part: every hand-built and zoo
#      program run on the GPU and compared with the interpreter / float64 reference), and the
#      conformance suite's cuda part when cortex.testing exists
#   4. the benchmark: TreeLSTM hidden 256, batch 1 and 10, parse-like trees, next to PyTorch
#      CUDA eager level-batched in the same run (benchmarks/bench_treelstm.py) -> JSON; then a
#      small schedule sweep of the cuda target (tools/gpu_schedule_sweep.py) for tuning, the
#      cross-lane GEMV reductions (reduce_lanes x threads x weight_layout) first
#
# Output: $OUT (default ./gpu_check_out): gpu_check.json, gpu_check.log, bench_treelstm.json,
# schedule_sweep.json, pytest_cuda.txt, conformance_cuda.txt, pycuda_build.log (at most 8 files,
# as the device tool returns). Budget: about 8 minutes on 16 cores (the pycuda build is about 3 CPU-minutes).
#
# The wheelhouse is committed (about 2 MB). To refresh it (on a machine with internet), from the
# repository root:
#   pip download pycuda==2026.1 --no-binary pycuda --no-deps -d tools/wheelhouse
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux2014_x86_64 -d tools/wheelhouse pytools platformdirs mako siphash24
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
cd "$ROOT"
OUT="${OUT:-$ROOT/gpu_check_out}"
SITE="${SITE:-/tmp/cortex_gpu_site}"
BUILD="${BUILD:-/tmp/cortex_pycuda_build}"
PY="${PYTHON:-python3}"
WHEELS="$ROOT/tools/wheelhouse"
JOBS="$(nproc 2>/dev/null || echo 4)"
BUILD_ONLY=0
[ "${1:-}" = "--build-only" ] && BUILD_ONLY=1
mkdir -p "$OUT" "$SITE"
LOG="$OUT/gpu_check.log"
: >"$LOG"
STEPS=()
T0=$(date +%s)

log() { echo "[gpu_check +$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
step() {  # step NAME STATUS SECONDS DETAIL
  STEPS+=("{\"step\": \"$1\", \"status\": \"$2\", \"seconds\": $3, \"detail\": $("$PY" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$4")}")
  log "step $1: $2 ($3 s) $4"
}
summary() {
  local joined
  joined=$(IFS=,; echo "${STEPS[*]}")
  echo "{\"total_seconds\": $(( $(date +%s) - T0 )), \"steps\": [${joined}]}" >"$OUT/gpu_check.json"
  log "summary written to $OUT/gpu_check.json"
}
trap summary EXIT

# ---------------------------------------------------------------- 1. environment
s=$(date +%s)
{
  echo "--- nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1 || true
  echo "--- nvcc"; nvcc --version 2>&1 | tail -2 || true
  echo "--- python"; "$PY" -c 'import sys, numpy; print(sys.version); print("numpy", numpy.__version__)' 2>&1
  echo "--- torch"; "$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1 || true
} >>"$LOG" 2>&1
step environment ok $(( $(date +%s) - s )) "see gpu_check.log"

# ---------------------------------------------------------------- 2. pycuda
s=$(date +%s)
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
if "$PY" -c 'import pycuda' 2>/dev/null; then
  step pycuda ok $(( $(date +%s) - s )) "already importable: $("$PY" -c 'import pycuda; print(pycuda.VERSION_TEXT)')"
else
  BLOG="$OUT/pycuda_build.log"
  (
    set -e
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
      "$WHEELS"/pytools-*.whl "$WHEELS"/platformdirs-*.whl "$WHEELS"/mako-*.whl \
      $(ls "$WHEELS"/siphash24-*cp$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')*.whl 2>/dev/null)
    for mod in numpy typing_extensions markupsafe; do "$PY" -c "import $mod" || { echo "missing $mod"; exit 3; }; done
    inc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    [ -f "$inc/Python.h" ] || { echo "no Python.h in $inc: install the python dev headers"; exit 4; }
    cuda_root=""
    for c in "${CUDA_HOME:-}" "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")" /usr/local/cuda /usr/local/cuda-*; do
      if [ -n "$c" ] && [ -f "$c/include/cuda.h" ]; then cuda_root="$c"; break; fi
    done
    [ -n "$cuda_root" ] || { echo "no CUDA toolkit with include/cuda.h found (set CUDA_HOME)"; exit 5; }
    # the driver library to link: libcuda.so (or .so.1) wherever the driver put it; a stub with
    # the driver's soname where there is none (--build-only on a machine without a GPU)
    libdir="$BUILD/libcuda"
    mkdir -p "$libdir"
    found=$( (ldconfig -p 2>/dev/null | awk '/libcuda\.so(\.1)? /{print $NF}'; \
              ls /usr/local/nvidia/lib64/libcuda.so* /usr/lib/x86_64-linux-gnu/libcuda.so* \
                 "$cuda_root"/lib64/stubs/libcuda.so "$cuda_root"/targets/x86_64-linux/lib/stubs/libcuda.so 2>/dev/null \
              || true) | head -1)
    if [ -n "$found" ]; then
      ln -sf "$found" "$libdir/libcuda.so"
    else
      echo "no libcuda found: linking against a stub (pycuda will not import here)"
      echo 'void cortex_stub(void) {}' >"$BUILD/stub.c"
      gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$libdir/libcuda.so" "$BUILD/stub.c"
    fi
    rm -rf "$BUILD/src"; mkdir -p "$BUILD/src"
    tar xzf "$WHEELS"/pycuda-*.tar.gz -C "$BUILD/src" --strip-components=1
    cd "$BUILD/src"
    "$PY" configure.py --cuda-root="$cuda_root" --no-cuda-enable-curand --cudadrv-lib-dir="$libdir"
    "$PY" setup.py build_ext -j "$JOBS" --inplace
  ) >"$BLOG" 2>&1
  rc=$?
  export PYTHONPATH="$BUILD/src:$PYTHONPATH"
  if [ $rc -ne 0 ]; then
    step pycuda failed $(( $(date +%s) - s )) "build failed (rc $rc): $(tail -3 "$BLOG" | tr '\n' ' ')"
    [ $BUILD_ONLY -eq 1 ] && exit 1
  elif "$PY" -c 'import pycuda.driver as d; d.init()' >>"$BLOG" 2>&1; then
    step pycuda ok $(( $(date +%s) - s )) "built from the sdist with -j $JOBS; imports and initializes"
  else
    step pycuda built-not-importable $(( $(date +%s) - s )) "$(tail -1 "$BLOG")"
  fi
fi
[ $BUILD_ONLY -eq 1 ] && exit 0

"$PY" -m cortex info >>"$LOG" 2>&1

# ---------------------------------------------------------------- 3. tests and conformance
s=$(date +%s)
CORTEX_TEST_REQUIRE=cuda timeout 200 "$PY" -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests/cuda tests/plugins -k "(cuda or Cuda) and not emulated" \
  >"$OUT/pytest_cuda.txt" 2>&1
rc=$?
step tests $([ $rc -eq 0 ] && echo ok || echo failed) $(( $(date +%s) - s )) "$(tail -1 "$OUT/pytest_cuda.txt")"

s=$(date +%s)
if "$PY" -c 'import cortex.testing' 2>/dev/null; then
  timeout 150 "$PY" -m pytest -q -p no:cacheprovider --pyargs cortex.testing --cortex-target cuda \
    >"$OUT/conformance_cuda.txt" 2>&1
  rc=$?
  if [ $rc -eq 4 ]; then  # usage error: the suite's pytest plugin is not registered by an entry point
    timeout 150 "$PY" -m pytest -q -p no:cacheprovider -p cortex.testing.plugin --pyargs cortex.testing \
      --cortex-target cuda >"$OUT/conformance_cuda.txt" 2>&1
    rc=$?
  fi
  step conformance $([ $rc -eq 0 ] && echo ok || echo failed) $(( $(date +%s) - s )) "$(tail -1 "$OUT/conformance_cuda.txt")"
else
  step conformance absent 0 "cortex.testing is not in this checkout"
fi

# ---------------------------------------------------------------- 4. benchmark
s=$(date +%s)
timeout 150 "$PY" benchmarks/bench_treelstm.py --targets cuda --models TreeLSTM --batches 1,10 \
  --min-reps 50 --min-time 1 --max-time 3 --rounds 2 --out "$OUT/bench_treelstm.json" >>"$LOG" 2>&1
rc=$?
step benchmark $([ $rc -eq 0 ] && echo ok || echo failed) $(( $(date +%s) - s )) "$OUT/bench_treelstm.json"

s=$(date +%s)
timeout 90 "$PY" tools/gpu_schedule_sweep.py --budget-s 45 --out "$OUT/schedule_sweep.json" >>"$LOG" 2>&1
rc=$?
step schedule_sweep $([ $rc -eq 0 ] && echo ok || echo failed) $(( $(date +%s) - s )) "$OUT/schedule_sweep.json"
"$PY" tools/gpu_bench_summary.py "$OUT/bench_treelstm.json" 2>&1 | tee -a "$LOG"
