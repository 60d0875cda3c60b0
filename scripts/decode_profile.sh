#!/usr/bin/env bash
# Nsight Compute over one fused decode launch (device tool, kind nvidia-h200, carry
# [.deps/cutlass, .deps/googletest]): where the CTAs land, what the warps wait on.
#   bash scripts/decode_profile.sh OUTDIR [MODEL BATCH CONTEXT]
set -uo pipefail
out=${1:?usage: scripts/decode_profile.sh OUTDIR [MODEL BATCH CONTEXT]}
model=${2:-llama2-7b} batch=${3:-1} context=${4:-32768}
STAGES=build bash scripts/decode_dev.sh "$out"; [ -x build-dec/tools/tessera/tessera ] || exit 1
bin=build-dec/tools/tessera/tessera
metrics=sm__ctas_launched.sum,sm__ctas_launched.max,sm__ctas_launched.min,sm__cycles_active.avg,sm__cycles_active.max,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__warps_issue_stalled_barrier_per_issue_active.ratio,smsp__warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__warps_issue_stalled_wait_per_issue_active.ratio,smsp__warps_issue_stalled_membar_per_issue_active.ratio,smsp__warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
timeout 300 ncu --clock-control none -k regex:fused_decode_kernel -c 1 --metrics "$metrics" \
  --section WarpStateStats --section SourceCounters --print-summary none \
  $bin bench decode --models "$model" --batches "$batch" --contexts "$context" --impls fused --iters 2 \
  >"$out/ncu.txt" 2>&1
echo "ncu exit $?"
grep -v "^==PROF==" "$out/ncu.txt" | grep -v "^\[" | tail -90
