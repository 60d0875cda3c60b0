#!/usr/bin/env bash
# compute-sanitizer's memcheck, racecheck and synccheck over the single-GPU GPU tests (the
# kernels: attention, cluster collectives, fused decode). The multi-process comm and
# sequence-parallel tests are left out: the sanitizer follows one process, and their kernels
# (signals, copies) are the same ones the single-GPU tests launch.
#   scripts/gpu_sanitize.sh TEST_BINARY OUTDIR    -> OUTDIR/sanitize_<tool>.log, sanitize.txt
set -uo pipefail
bin=$1 out=$2
filter=${SANITIZE_FILTER:-"AttnGpu.*:ClusterCollectivesGpu.*:DecodeGpu.*"}
status=0
: >"$out/sanitize.txt"
for tool in memcheck racecheck synccheck; do
  log="$out/sanitize_$tool.log"
  timeout "${SANITIZE_TIMEOUT_S:-900}" compute-sanitizer --tool "$tool" --error-exitcode 99 \
    --print-limit 20 "$bin" --gtest_filter="$filter" >"$log" 2>&1
  rc=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
  tests=$(grep -E "^\[  (PASSED|FAILED)" "$log" | tr '\n' ' ')
  echo "$tool: exit $rc; ${summary:-no summary}; $tests" >>"$out/sanitize.txt"
  [ $rc -eq 0 ] || status=1
done
exit $status
