#!/usr/bin/env bash
# The decode kernel's development loop in one device call: build only what decode needs
# (attention instantiations left out), run the cluster and decode GPU tests, the decode and
# cluster benchmarks (a cluster-size sweep included) and the FlashInfer peers (grouped and MLA)
# side by side, and print a short table last.
#   device run, kind nvidia-h200, carry [.deps/cutlass, .deps/googletest, .whl]:
#     bash scripts/decode_dev.sh $OUT      -> $OUT/logs.tgz (every JSON and log), tables printed
# STAGES selects parts (default "build test bench sweep peer"; "tune" runs `tessera tune decode`
# into OUTDIR/decode_tune.tsv and times the tuned plans; "sanitize" adds compute-sanitizer over
# the cluster and decode GPU tests);
# CONTEXTS, BATCHES the cases.
set -uo pipefail
out=${1:?usage: scripts/decode_dev.sh OUTDIR}
mkdir -p "$out"
stages=${STAGES:-"build test bench sweep peer"}
has() { [[ " $stages " == *" $1 "* ]]; }
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export TESSERA_COMMIT=${TESSERA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
bin=build-dec/tools/tessera/tessera
contexts=${CONTEXTS:-1024,4096,16384,32768}
batches=${BATCHES:-1,16}
if has build; then
  start=$(date +%s)
  cmake -S . -B build-dec -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
    -DCUTLASS_INCLUDE_DIR="$PWD/.deps/cutlass/include" -DTESSERA_KERNEL_EXCLUDE='attention_sm90_' \
    >"$out/build.log" 2>&1 &&
    cmake --build build-dec -j "$(nproc)" --target tessera_cli tessera_gpu_tests >>"$out/build.log" 2>&1 ||
    { echo "BUILD FAILED"; grep -E "error" "$out/build.log" | head -30; exit 1; }
  echo "build ok in $(( $(date +%s) - start )) s"
fi
if has test; then
  build-dec/tests/tessera_gpu_tests --gtest_filter='ClusterCollectivesGpu.*:DecodeGpu.*' >"$out/tests.log" 2>&1
  echo "gpu tests: exit $?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|error" "$out/tests.log" | head -20
fi
if has bench; then
  $bin bench cluster --json "$out/cluster.json" >"$out/cluster.log" 2>&1 || echo "bench cluster failed"
  $bin bench decode --batches "$batches" --contexts "$contexts" --json "$out/decode.json" >"$out/decode.log" 2>&1 ||
    echo "bench decode failed"
fi
if has sweep; then
  $bin bench decode --batches 1,16 --contexts 4096 --cluster-sizes 1,2,4,8,16 --impls fused \
    --json "$out/decode_sweep.json" >"$out/decode_sweep.log" 2>&1 || echo "sweep failed"
fi
if has tune; then
  $bin tune decode --batches "$batches" --contexts "$contexts" --candidates 1,2,4,8,16 --iters 30 \
    --table "$out/decode_tune.tsv" >"$out/decode_tune.log" 2>&1 || echo "tune failed"
  TESSERA_DECODE_TUNE_TABLE="$out/decode_tune.tsv" $bin bench decode --batches "$batches" --contexts "$contexts" \
    --impls fused --json "$out/decode_tuned.json" >"$out/decode_tuned.log" 2>&1 || echo "bench decode (tuned) failed"
fi
if has peer; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$out/pip.log" 2>&1 && PYTHONPATH=/tmp/site python3 bench/anchors/flashinfer_decode.py \
    --batches "$batches" --contexts "$contexts" --json "$out/decode_flashinfer.json" >"$out/decode_flashinfer.log" 2>&1 ||
    echo "peer failed: $(tail -3 "$out/decode_flashinfer.log" "$out/pip.log" 2>/dev/null)"
  # DeepSeek-V2-Lite's MLA block as SGLang runs it on FlashInfer's MLA kernel.
  PYTHONPATH=/tmp/site python3 bench/anchors/flashinfer_mla_decode.py --batches "$batches" --contexts "$contexts" \
    --json "$out/decode_flashinfer_mla.json" >"$out/decode_flashinfer_mla.log" 2>&1 ||
    echo "MLA peer failed: $(tail -3 "$out/decode_flashinfer_mla.log" 2>/dev/null)"
fi
if has sanitize; then
  SANITIZE_SUITES='ClusterCollectivesGpu.* DecodeGpu.*' SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-150} \
    scripts/gpu_sanitize.sh build-dec/tests/tessera_gpu_tests "$out"
  mv "$out/sanitize.txt" "$out/sanitize.log"
fi
# One archive of every JSON and log comes back (the device returns at most 8 files); the tables
# below are printed from it.
# (Written beside, then moved in: tar fails on an archive that grows inside the folder it packs.)
archive=$(mktemp /tmp/decode_logs.XXXXXX)
tar czf "$archive" -C "$out" . && find "$out" -mindepth 1 -delete && mv "$archive" "$out/logs.tgz"
for f in cluster decode_sweep decode_tune decode_tuned decode_flashinfer decode_flashinfer_mla decode sanitize; do
  tar xzf "$out/logs.tgz" -O "./$f.log" 2>/dev/null | grep -v "^\[" | grep -v "^RESULT" | tail -40 | sed "1i === $f ==="
done
has test && echo "=== gpu tests ===" && tar xzf "$out/logs.tgz" -O ./tests.log 2>/dev/null | grep -E "^\[  (PASSED|FAILED)|Failure|error:|Expected|Which is" | head -20
