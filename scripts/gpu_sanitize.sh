#!/usr/bin/env bash
# compute-sanitizer's memcheck, racecheck and synccheck over the single-GPU GPU tests (the
# kernels: attention, GEMM, cluster collectives, fused decode, model ops, the Llama model, the
# loopback AllGather+GEMM). The multi-process comm and sequence-parallel tests are left out:
# the sanitizer follows one process, and their kernels (signals, copies) are the same ones the
# single-GPU tests launch.
#   scripts/gpu_sanitize.sh TEST_BINARY OUTDIR    -> OUTDIR/sanitize_<tool>.log, sanitize.txt
# Each test suite runs on its own under each tool, bounded by SANITIZE_TIMEOUT_S, so one slow
# suite cannot hide the others' results. SANITIZE_SUITES (space-separated gtest filters) and
# SANITIZE_TOOLS pick what runs.
set -uo pipefail
bin=$1 out=$2
suites=${SANITIZE_SUITES:-"AttnGpu.* ClusterCollectivesGpu.* DecodeGpu.* GemmGpu.* ModelOpsGpu.* LlamaGpu.* TpLoopbackGpu.*"}
tools=${SANITIZE_TOOLS:-"memcheck racecheck synccheck"}
status=0
: >"$out/sanitize.txt"
for tool in $tools; do
  log="$out/sanitize_$tool.log"
  : >"$log"
  for suite in $suites; do
    start=$(date +%s)
    timeout "${SANITIZE_TIMEOUT_S:-900}" compute-sanitizer --tool "$tool" --error-exitcode 99 \
      --print-limit 20 "$bin" --gtest_filter="$suite" >"$log.part" 2>&1
    rc=$?
    cat "$log.part" >>"$log"
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log.part" | tail -1)
    tests=$(grep -E "^\[  (PASSED|FAILED)" "$log.part" | tr '\n' ' ')
    [ $rc -eq 124 ] && summary="killed at the ${SANITIZE_TIMEOUT_S:-900} s bound"
    echo "$tool $suite: exit $rc in $(($(date +%s) - start)) s; ${summary:-no summary}; $tests" \
      >>"$out/sanitize.txt"
    [ $rc -eq 0 ] || status=1
  done
  rm -f "$log.part"
done
exit $status
