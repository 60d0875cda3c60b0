#!/usr/bin/env bash
# Nsight Compute over one fused decode launch per case (device tool, kind nvidia-h200, carry
# [.deps/cutlass, .deps/googletest]): where the CTAs land, what the warps wait on, and the SASS
# lines that cost the most (scripts/ncu_top_lines.py).
#   bash scripts/decode_profile.sh OUTDIR ["MODEL BATCH CONTEXT" ...]
set -uo pipefail
out=${1:?usage: scripts/decode_profile.sh OUTDIR ["MODEL BATCH CONTEXT" ...]}
shift
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=("llama2-7b 1 32768")
STAGES=build bash scripts/decode_dev.sh "$out"; [ -x build-dec/tools/tessera/tessera ] || exit 1
bin=build-dec/tools/tessera/tessera
metrics=sm__ctas_launched.max,sm__ctas_launched.min,sm__cycles_active.avg,sm__cycles_active.max,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active
for c in "${cases[@]}"; do
  read -r model batch context <<<"$c"
  name="${model}_b${batch}_ctx${context}"
  echo "=== $name"
  run=(bench decode --models "$model" --batches "$batch" --contexts "$context" --impls fused --iters 2)
  timeout 200 ncu --clock-control none -k regex:fused_decode_kernel -c 1 --metrics "$metrics" $bin "${run[@]}" 2>&1 |
    grep -E "^\s+(sm__|gpu__|dram__|smsp__)"
  timeout 200 ncu --clock-control none -k regex:fused_decode_kernel -c 1 --section SourceCounters --section WarpStateStats \
    -o "$out/$name" $bin "${run[@]}" >/dev/null 2>&1
  ncu -i "$out/$name.ncu-rep" --page source --csv --print-source sass >"$out/$name.csv" 2>/dev/null &&
    python3 scripts/ncu_top_lines.py "$out/$name.csv" 14
  rm -f "$out/$name.csv"
done
