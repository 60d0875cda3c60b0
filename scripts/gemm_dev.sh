#!/usr/bin/env bash
# The GEMM building block's development loop in one device call: build with the tuning variants
# (kernels/gemm/inst/gemm_sm90_variants.cu, -DTESSERA_GEMM_DEV_VARIANTS; attention left out),
# run the GEMM GPU tests, then `tessera bench gemm` at one row tile once with production and
# once with each variant (TESSERA_GEMM_KERNEL), each beside cuBLASLt, and print a short table.
#   device run, kind nvidia-h200, carry [.deps/cutlass, .deps/googletest, .deps/nlohmann_json]:
#     bash scripts/gemm_dev.sh $OUT      -> $OUT/gemm_dev.tgz (every JSON and log)
# VARIANTS lists the variants (default "persistent nobias cluster1"); BENCH_ARGS the cases and
# configurations (default: Llama-3-70B's TP 8 shapes at M 128, the 128x64 tile whole).
set -uo pipefail
out=${1:?usage: scripts/gemm_dev.sh OUTDIR}
mkdir -p "$out/work"
export PATH=/usr/local/cuda/bin:$PATH
export TESSERA_COMMIT=${TESSERA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
variants=${VARIANTS:-"persistent nobias cluster1"}
read -r -a bench_args <<<"${BENCH_ARGS:-"--model llama3-70b --tp 8 --m 128 --configs 128x64/dp/s1"}"
bin=build-gemm-dev/tools/tessera/tessera
start=$(date +%s)
cmake -S . -B build-gemm-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
  -DCUTLASS_INCLUDE_DIR="$PWD/.deps/cutlass/include" -DCMAKE_CUDA_FLAGS=-DTESSERA_GEMM_DEV_VARIANTS \
  -DTESSERA_KERNEL_EXCLUDE='attention_sm90_|gemm_sm90_f16|gemm_sm90_bf16_kn|ag_gemm_sm90_f16' \
  >"$out/work/build.log" 2>&1 &&
  cmake --build build-gemm-dev -j "$(nproc)" --target tessera_cli tessera_gpu_tests >>"$out/work/build.log" 2>&1 ||
  { echo "BUILD FAILED"; grep -E "error" "$out/work/build.log" | head -30; exit 1; }
echo "build ok in $(($(date +%s) - start)) s"
build-gemm-dev/tests/tessera_gpu_tests --gtest_filter='GemmGpu.*' >"$out/work/tests.log" 2>&1
echo "gemm gpu tests: exit $?"
for v in production $variants; do
  name=$([ "$v" = production ] && echo "" || echo "$v")
  TESSERA_GEMM_KERNEL=$name $bin bench gemm "${bench_args[@]}" --json "$out/work/gemm_$v.json" \
    >"$out/work/gemm_$v.log" 2>&1 || echo "bench gemm ($v) failed"
done
tar czf "$out/gemm_dev.tgz" -C "$out/work" .
for v in production $variants; do
  echo "=== $v"
  grep -E "^  " "$out/work/gemm_$v.log" | sed 's/  */ /g'
done
