#!/usr/bin/env bash
# compute-sanitizer's memcheck, racecheck and synccheck over the single-GPU GPU tests (the
# kernels: attention, GEMM, cluster collectives, fused decode, model ops, the Llama model, the
# loopback AllGather+GEMM, the Flux DiT). The multi-process comm and sequence-parallel tests are
# left out: the sanitizer follows one process, and their kernels (signals, copies) are the same
# ones the single-GPU tests launch.
#   scripts/gpu_sanitize.sh TEST_BINARY OUTDIR    -> OUTDIR/sanitize_<tool>.log, sanitize.txt
# Each (tool, suite) pair runs as its own process, bounded by SANITIZE_TIMEOUT_S, so one slow
# suite cannot hide the others' results. SANITIZE_SUITES (space-separated gtest filters) and
# SANITIZE_TOOLS pick what runs; SANITIZE_JOBS pairs run at once (default 8): the tools spend
# most of their time on the host, so several share one GPU well (seven to nine at once on a
# 16-core H200 machine, 2026-11-28; twelve cost more than they saved). All 33 pairs take more than
# one 10-minute device call: split them by SANITIZE_TOOLS (racecheck alone, then the others).
# Racecheck reports hazards inside cuBLASLt's kernels (names nvjet_*): closed NVIDIA kernels
# Tessera calls as its baseline and fallback, not Tessera's to mend (docs/RELIABILITY.md, "GPU:
# compute-sanitizer"); a suite whose tests pass and whose every hazard is inside them counts as
# clean, and its line says how many there were. (Excluding those kernels from the tool instead,
# --kernel-name-exclude, made the sanitizer fail on a hardware exception in them.) Likewise a
# memcheck suite whose only errors are CUDA API errors returned inside NCCL's initialization
# (NCCL asks for kernels its build has no image of, and carries on) counts as clean.
set -uo pipefail
set -f  # the suites are gtest filters, not file globs
bin=$1 out=$2
# DecodeGpu runs as four suites, racecheck's slowest pairs apart (6e273eb, H200, few cases, seven
# pairs at once: Llama-3 220 s, the MLA unfused path and graph replays 336 s, the fused MLA
# kernel 204 s, the rest 102 s).
mla="DecodeGpu.*Mla*:DecodeGpu.DeepSeek*"
decode="DecodeGpu.*-DecodeGpu.Llama3*:$mla DecodeGpu.Llama3* DecodeGpu.DeepSeekV2LiteMlaFused*"
decode+=" $mla-DecodeGpu.DeepSeekV2LiteMlaFused*"
suites=${SANITIZE_SUITES:-"AttnGpu.* ClusterCollectivesGpu.* $decode GemmGpu.* ModelOpsGpu.* LlamaGpu.* TpLoopbackGpu.* FluxGpu.*"}
tools=${SANITIZE_TOOLS:-"racecheck memcheck synccheck"}
jobs=${SANITIZE_JOBS:-8}
bound=${SANITIZE_TIMEOUT_S:-900}
# The tools slow every kernel and host call many times over: the multi-process suites' waits
# (NCCL's set-up included) get a bound to match.
export TESSERA_TIMEOUT_MS=${SANITIZE_TESSERA_TIMEOUT_MS:-300000}
# Graph-replay tests replay 3 times, not 100: the tools check every replay's kernels alike (the
# test stage keeps the 100-replay determinism check).
export TESSERA_TEST_REPLAYS=${SANITIZE_TEST_REPLAYS:-3}
# The decode and GEMM tests run a few cases, one per path of their kernels (tests/gpu/
# sanitize_env.h: racecheck took over 5 minutes on the Llama-3 GQA matrix, synccheck over 6 on
# the GEMM's 4096-row case); the test stage runs all of them.
export TESSERA_TEST_CASES=${SANITIZE_TEST_CASES:-few}
parts=$out/sanitize.parts
rm -rf "$parts" && mkdir -p "$parts"

# A (tool, suite) pair's file name: the filter's punctuation as underscores.
pair_name() { echo "$1.$(printf '%s' "$2" | tr -c 'A-Za-z0-9_' '_')"; }

# One pair: its log in parts/<name>.log, its summary line in parts/<name>.txt.
sanitize_one() {
  local tool=$1 suite=$2 name log start rc summary tests races ours errors api nccl
  name=$(pair_name "$tool" "$suite")
  log=$parts/$name.log
  start=$(date +%s)
  timeout "$bound" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 1000 \
    "$bin" --gtest_filter="$suite" >"$log" 2>&1
  rc=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
  tests=$(grep -E "^\[  (PASSED|FAILED)" "$log" | tr '\n' ' ')
  if [ $rc -eq 99 ] && [[ "$tests" == *PASSED* && "$tests" != *FAILED* && "$summary" != *"not printed"* ]]; then
    if [ "$tool" = racecheck ]; then
      races=$(grep -c "Race reported" "$log")
      ours=$(grep "Race reported" "$log" | grep -vc " at nvjet_")
      [ "$races" -gt 0 ] && [ "$ours" -eq 0 ] &&
        { rc=0; summary="$summary: all $races inside cuBLASLt's nvjet_* kernels, none in Tessera's"; }
    elif [ "$tool" = memcheck ]; then
      # CUDA API errors that NCCL's initialization hits and handles itself (ncclInitKernelsForDevice
      # asks for the attributes of kernels its build has no image of): the call's first frame is
      # in libnccl (the first host frame past the driver's own, libcuda).
      # (Every process's summary counts: the DiT tests' workers are processes of their own.)
      errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | awk '{ n += $1 } END { print n + 0 }')
      api=$(grep -c "^========= Program hit" "$log")
      nccl=$(awk '/^========= Program hit/ { look = 1; next }
                  look && /Host Frame/ && !/in libcuda\.so/ { if (/in libnccl\.so/) n++; look = 0 }
                  END { print n + 0 }' "$log")
      [ "${errors:-0}" -gt 0 ] && [ "$errors" -eq "$api" ] && [ "$api" -eq "$nccl" ] &&
        { rc=0; summary="$summary: all $errors CUDA API errors NCCL's initialization hits and handles, none in Tessera's"; }
    fi
  fi
  [ $rc -eq 124 ] && summary="killed at the $bound s bound"
  echo "$tool $suite: exit $rc in $(($(date +%s) - start)) s; ${summary:-no summary}; $tests" \
    >"$parts/$name.txt"
}

for tool in $tools; do
  for suite in $suites; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    sanitize_one "$tool" "$suite" &
  done
done
wait

status=0
: >"$out/sanitize.txt"
for tool in $tools; do
  : >"$out/sanitize_$tool.log"
  for suite in $suites; do
    name=$(pair_name "$tool" "$suite")
    cat "$parts/$name.log" >>"$out/sanitize_$tool.log"
    cat "$parts/$name.txt" >>"$out/sanitize.txt"
    grep -q ": exit 0 in " "$parts/$name.txt" || status=1
  done
done
rm -rf "$parts"
exit $status
