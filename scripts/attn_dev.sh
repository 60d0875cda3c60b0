#!/usr/bin/env bash
# Standalone build + GPU test + benchmark of Tessera's local attention (issue 3), independent of
# the rest of the library (other parts may be mid-edit). Compiles only core, runtime, attn, the
# attention kernels (plus tuning variants), the attention tests and `tessera bench attn`, straight
# with nvcc/g++, into build-attn-dev/.
#
#   scripts/attn_dev.sh build          compile (JOBS=N parallel; default all cores)
#   scripts/attn_dev.sh test [OUT]     gpu + cpu attention tests (gtest)
#   scripts/attn_dev.sh bench [OUT]    tessera bench attn (+ torch SDPA anchor) and kernel variants
#   scripts/attn_dev.sh all [OUT]      build if needed, test, bench; a short table last
#
# Binaries built on the development machine (static libstdc++, static cudart) travel in
# build-attn-dev/bin and are used as they are when they run; otherwise `all` rebuilds there,
# with the CUTLASS headers from .deps/cutlass and gtest from build-attn-dev/gtest. On the H200:
#   device run, kind nvidia-h200, carry [.deps/cutlass, build-attn-dev/bin, build-attn-dev/gtest]:
#   bash scripts/attn_dev.sh all $OUT 2>&1
# A tuning variant registered as "cand" (kernels/attn/inst/attention_sm90_variants_d*.cu) also
# runs through the GPU tests and the full sweep; without one those passes repeat production.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
B=$ROOT/build-attn-dev
OBJ=$B/obj
BIN=$B/bin
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
JOBS=${JOBS:-$(nproc)}
CUTLASS=${CUTLASS_INCLUDE_DIR:-$ROOT/.deps/cutlass/include}
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1

gtest_dirs() {
  if [ -f /usr/include/gtest/gtest.h ] && [ -f /usr/lib/x86_64-linux-gnu/libgtest.a ]; then
    GTEST_INC=/usr/include; GTEST_LIB=/usr/lib/x86_64-linux-gnu
  else
    GTEST_INC=$B/gtest/include; GTEST_LIB=$B/gtest/lib
  fi
}

build() {
  mkdir -p "$OBJ" "$BIN"
  gtest_dirs
  # Vendor gtest so a rebuild on a machine without it still works.
  if [ "$GTEST_INC" = /usr/include ] && [ ! -d "$B/gtest/include/gtest" ]; then
    mkdir -p "$B/gtest/include" "$B/gtest/lib"
    cp -r /usr/include/gtest "$B/gtest/include/"
    cp /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a "$B/gtest/lib/"
  fi
  local cxxflags="-std=c++20 -O2 -DNDEBUG -DTESSERA_WITH_CUDA=1 -Wall -Wextra -I$ROOT/include -I$ROOT/src -I$ROOT/kernels -I$ROOT/tools/tessera -I$ROOT/tests -I$CUDA_HOME/include -I$GTEST_INC -pthread"
  local cuflags="-std=c++20 -O3 -DNDEBUG -DTESSERA_WITH_CUDA=1 -DTESSERA_ATTN_DEV_VARIANTS -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo -Xptxas -v -I$ROOT/include -I$ROOT/src -I$ROOT/kernels -I$CUTLASS"
  local cc_sources=(src/core/*.cc src/runtime/stream.cc src/runtime/memory.cc src/runtime/cuda/stream_cuda.cc
                    src/runtime/cuda/memory_cuda.cc src/attn/*.cc src/attn/cuda/*.cc
                    tools/tessera/main.cc tools/tessera/options.cc tools/tessera/bench_record.cc
                    tools/tessera/bench_attn.cc tests/gpu/attn_*.cc tests/unit/attn_*.cc)
  local cu_sources=(src/attn/cuda/*.cu kernels/attn/inst/*.cu)
  local jobs_file=$B/jobs.txt
  : >"$jobs_file"
  for s in "${cc_sources[@]}"; do
    o=$OBJ/$(echo "$s" | tr '/' '_').o
    if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ -n "$(find include src kernels tools -name '*.h' -newer "$o" 2>/dev/null | head -1)" ]; then
      echo "g++ $cxxflags -c $s -o $o" >>"$jobs_file"
    fi
  done
  for s in "${cu_sources[@]}"; do
    o=$OBJ/$(echo "$s" | tr '/' '_').o
    if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ -n "$(find kernels include -name '*.cuh' -newer "$o" -o -name '*.h' -newer "$o" 2>/dev/null | head -1)" ]; then
      echo "$NVCC $cuflags -c $s -o $o > $o.log 2>&1 || { cat $o.log; exit 1; }" >>"$jobs_file"
    fi
  done
  echo "[attn_dev] compiling $(wc -l <"$jobs_file") files with $JOBS jobs"
  if ! xargs -P "$JOBS" -I{} sh -c '{}' <"$jobs_file"; then echo "[attn_dev] BUILD FAILED"; return 1; fi
  grep -h -E "spill|C75|Used [0-9]+ registers" "$OBJ"/kernels_attn_inst_*.o.log 2>/dev/null | grep -v " 0 bytes spill" | sort | uniq -c | head -20
  local lib_objs=() test_objs=() cli_objs=() all_objs=()
  for s in "${cc_sources[@]}" "${cu_sources[@]}"; do all_objs+=("$OBJ/$(echo "$s" | tr '/' '_').o"); done
  for o in "${all_objs[@]}"; do
    case $(basename "$o") in
      tests_*) test_objs+=("$o") ;;
      tools_*) cli_objs+=("$o") ;;
      *) lib_objs+=("$o") ;;
    esac
  done
  local link="$NVCC -gencode=arch=compute_90a,code=sm_90a -cudart static -Xcompiler=-static-libstdc++,-static-libgcc,-pthread"
  $link "${lib_objs[@]}" "${test_objs[@]}" "$GTEST_LIB/libgtest.a" "$GTEST_LIB/libgtest_main.a" -o "$BIN/attn_tests" || return 1
  $link "${lib_objs[@]}" "${cli_objs[@]}" -o "$BIN/tessera" || return 1
  echo "[attn_dev] built $BIN/attn_tests $BIN/tessera"
}

ensure_built() {
  if "$BIN/attn_tests" --gtest_list_tests >/dev/null 2>&1 && "$BIN/tessera" bench attn --help >/dev/null 2>&1; then
    echo "[attn_dev] using the carried binaries"
    return 0
  fi
  echo "[attn_dev] carried binaries do not run here; building"
  rm -rf "$OBJ"
  build
}

run_tests() {
  local out=${1:-$B/out}; mkdir -p "$out"
  timeout 300 "$BIN/attn_tests" --gtest_filter='Attn*' 2>&1 | tee "$out/attn_tests.log" |
    grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|error|Expected|Which is|actual|tolerance" | head -60
  local status=${PIPESTATUS[0]}
  # The production candidates ("cand" variants; production for the rest) through the GPU tests.
  echo "[attn_dev] GPU tests with TESSERA_ATTN_KERNEL=cand"
  TESSERA_ATTN_KERNEL=cand timeout 240 "$BIN/attn_tests" --gtest_filter='AttnGpu.*' 2>&1 |
    tee "$out/attn_tests_cand.log" | grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" | head -30
  return $(( status != 0 || PIPESTATUS[0] != 0 ))
}

run_bench() {
  local out=${1:-$B/out}; mkdir -p "$out"
  local cases=${CASES:-}
  local extra=()
  [ -n "$cases" ] && extra=(--cases "$cases")
  timeout 240 "$BIN/tessera" bench attn "${extra[@]}" --json "$out/attn.json" 2>&1 | tee "$out/bench_attn.log"
  local status=${PIPESTATUS[0]}
  TESSERA_ATTN_KERNEL=cand timeout 120 "$BIN/tessera" bench attn "${extra[@]}" --anchor none \
    --json "$out/attn_cand.json" >"$out/bench_attn_cand.log" 2>&1 || status=1
  # Kernel variants (no anchor) on the cases that decide the tile shape; "prod" is the
  # production kernel again (the run-to-run spread).
  if [ -z "${NO_VARIANTS:-}" ]; then
    # VARIANTS: head-dim:variant pairs ("prod": production again, the run-to-run spread).
    for spec in ${VARIANTS:-d256:prod d256:hoisted d128:prod d128:hoisted d64:prod d64:fresh}; do
      local d=${spec%%:*} v=${spec#*:} cases_var=VARIANT_CASES_${spec%%:*}
      [ "$v" = prod ] && name="" || name=$v
      local default_cases="b1_h24_${d}_l16384,b1_h24_${d}_l16384_causal"
      TESSERA_ATTN_KERNEL=$name timeout 60 "$BIN/tessera" bench attn --anchor none --target-ms 200 \
        --cases "${!cases_var:-$default_cases}" 2>&1 |
        grep -E "^  b1.*us " | sed "s/tessera sm90/$d $v/" | tee -a "$out/variants.log"
    done
  fi
  return "$status"
}

cmd=${1:-all}; shift || true
case $cmd in
  build) build ;;
  test) run_tests "$@" ;;
  bench) run_bench "$@" ;;
  all)
    out=${1:-$B/out}; mkdir -p "$out"
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 | tee "$out/gpu.txt"
    ensure_built || exit 1
    run_tests "$out"; t=$?
    run_bench "$out"; b=$?
    if command -v cuobjdump >/dev/null; then  # SASS of every attention kernel, for the notes
      cuobjdump -sass "$BIN/tessera" 2>/dev/null >"$out/attn.sass"
      echo "sass: $(wc -l <"$out/attn.sass") lines"
    fi
    if [ -n "${NCU:-}" ] && command -v ncu >/dev/null; then  # stall reasons of the D64 kernel
      timeout 120 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        --section ComputeWorkloadAnalysis --section InstructionStats -k regex:attention_sm90 \
        --launch-skip 1 --launch-count 1 "$BIN/tessera" bench attn --anchor none --warmup 0 \
        --min-iters 1 --target-ms 1 --check-rows 1 --cases b1_h24_d64_l16384 >"$out/ncu_d64.txt" 2>&1
      echo "ncu: $(grep -c . "$out/ncu_d64.txt") lines"
    fi
    echo "=== variants ==="; sort -k1,1 -s "$out/variants.log" 2>/dev/null
    echo "=== summary (tests rc $t, bench rc $b) ==="
    sed -n '/^# tessera bench attn on/,$p' "$out/bench_attn.log"
    python3 - "$out/attn.json" "$out/attn_cand.json" <<'PY' || true
import json, sys
prod, cand = (json.load(open(p)) for p in sys.argv[1:3])
cudnn = {r["case"]: r["tflops"] for r in prod if r["impl"] == "torch sdpa cudnn"}
print("# candidates (TESSERA_ATTN_KERNEL=cand) vs the same run's cuDNN")
for r in cand:
    c = cudnn.get(r["case"])
    print(f"  {r['case']:32s} {r['impl']:14s} {r['tflops']:8.1f} TFLOP/s  x_cudnn {r['tflops'] / c if c else float('nan'):5.2f}  {'ok' if r['ok'] else 'WRONG'}")
PY
    # The device tool returns at most 8 files: keep the JSON records, pack the rest.
    (cd "$out" && tar czf logs.tar.gz --remove-files ./*.log ./*.txt ./*.sass 2>/dev/null)
    exit $(( t != 0 || b != 0 ))
    ;;
  *) echo "usage: $0 build|test|bench|all [OUT]"; exit 2 ;;
esac
