#!/usr/bin/env bash
# A whole GPU check in one call (run through `./run gpu-check OUTDIR` on the GPU machine):
# configure and build with every core, run the gpu tests, run the benchmarks with their
# anchors side by side, write logs and JSON to OUTDIR, and print a short table last.
#   STAGES="build test comm launchers sp attn decode gemm tp llm sched python sanitize spsweep"
#   selects stages (default: all but tp, the tensor-parallel sweep on every GPU beside torch,
#   writing the planner's tuning table, then its pick against the unfused pair; sched, the
#   scheduler's strategies and its rule (bench sched); llm, the Llama decoder end to end (on one
#   GPU Llama-3-8B beside transformers, on several a Llama-3-70B-shaped stack at TP 1 and TP N);
#   dit, a Flux.1-dev-shaped DiT step beside diffusers (several GPUs: every sequence-parallel
#   method beside the torch USP peer; DIT_SEQ lists the image token counts; carry .whl);
#   spsweep, the long sequence-parallel sweep of scripts/sp_sweep.sh, PARTS selects its
#   parts; python, the Python package built against build-gpu with its pytest and per-call
#   overhead, scripts/gpu_python.sh; and sanitize, compute-sanitizer over the single-GPU tests,
#   scripts/gpu_sanitize.sh).
# Everything lands in OUTDIR/work/ and is packed into OUTDIR/gpu-check.tgz at the end (the
# device tool brings back few files).
set -uo pipefail
final=$1
out=$final/work
mkdir -p "$out"
stages=${STAGES:-"build test comm launchers sp attn decode gemm"}
has() { [[ " $stages " == *" $1 "* ]]; }
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
export TESSERA_COMMIT=${TESSERA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
bin=build-gpu/tools/tessera/tessera
status=0

if has build; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
    -DCUTLASS_INCLUDE_DIR="$PWD/.deps/cutlass/include" ${CMAKE_ARGS:-} >"$out/build.log" 2>&1 &&
  cmake --build build-gpu -j "$(nproc)" >>"$out/build.log" 2>&1 || { echo "BUILD FAILED"; grep -E "error" "$out/build.log" | head -20; tail -5 "$out/build.log"; tar czf "$final/gpu-check.tgz" -C "$out" .; exit 1; }
  echo "build ok"
fi
$bin info >"$out/info.txt" 2>&1 || status=1
if has test; then
  ctest --test-dir build-gpu -L gpu --output-on-failure --timeout 300 >"$out/gpu_tests.log" 2>&1 || status=1
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/gpu_tests.log" | tail -15
fi
if has comm; then
  $bin bench comm --heap nvshmem --compare-heaps --json "$out/comm_1x${ngpu}.json" >"$out/comm.log" 2>&1 || status=1
  # Emulated machines of ngpu/2 GPUs (2x2 on 4 GPUs), and on 8 GPUs also 4x2 (issue 5).
  for nodes in 2 4; do
    [ "$ngpu" -ge $((2 * nodes)) ] && [ $((ngpu % nodes)) -eq 0 ] || continue
    $bin bench comm --heap nvshmem --emulate-nodes "$nodes" --ops all_to_all,all_gather,reduce_scatter,sendrecv,put,get \
      --json "$out/comm_${nodes}x$((ngpu / nodes))_emulated.json" >>"$out/comm.log" 2>&1 || status=1
  done
  torchrun --standalone --nproc_per_node "$ngpu" bench/anchors/torch_comm.py --json "$out/torch_comm.json" \
    >"$out/torch_comm.log" 2>&1 || status=1
fi
if has launchers; then
  # The same binary under the other launchers: torchrun's variables, and mpirun (the tcp
  # bootstrap through MASTER_ADDR/PORT when this build has no MPI).
  { echo "--- under torchrun"; torchrun --standalone --nproc_per_node "$ngpu" --no-python $bin bench comm \
      --ops all_gather,put --max-bytes 1M --iters 3 --warmup 1
    echo "--- under mpirun"; mpirun --allow-run-as-root --oversubscribe -np "$ngpu" -x MASTER_ADDR=127.0.0.1 \
      -x MASTER_PORT=29533 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS $bin bench comm \
      --ops all_gather,put --max-bytes 1M --iters 3 --warmup 1; } >"$out/launchers.log" 2>&1 || status=1
  grep -E "^--- |#wrong total" "$out/launchers.log"
fi
if has sp; then
  $bin demo --json-prefix "$out/sp" >"$out/sp.log" 2>&1 || status=1
fi
if has spsweep; then
  scripts/sp_sweep.sh "$bin" "$out" || status=1
fi
if has attn && $bin bench attn --help >/dev/null 2>&1; then
  $bin bench attn --json "$out/attn.json" >"$out/attn.log" 2>&1 || status=1
fi
if has decode; then
  $bin bench cluster --json "$out/cluster.json" >"$out/cluster.log" 2>&1 || status=1
  $bin bench decode --json "$out/decode.json" >"$out/decode.log" 2>&1 || status=1
  if [ -f bench/anchors/flashinfer_decode.py ]; then
    python3 bench/anchors/flashinfer_decode.py --json "$out/decode_flashinfer.json" \
      >"$out/decode_flashinfer.log" 2>&1 || status=1
    python3 bench/anchors/flashinfer_mla_decode.py --json "$out/decode_flashinfer_mla.json" \
      >"$out/decode_flashinfer_mla.log" 2>&1 || status=1
  fi
fi
if has gemm; then
  # The GEMM building block beside cuBLASLt; the fused AllGather+GEMM of four ranks on this GPU
  # (loopback) and its hooks' cost; the tensor-parallel layers' unfused pairs.
  $bin bench gemm --json "$out/gemm.json" >"$out/gemm.log" 2>&1 || status=1
  $bin bench tp-loopback --json "$out/tp_loopback.json" >"$out/tp_loopback.log" 2>&1 || status=1
  $bin bench tp --json "$out/tp.json" >"$out/tp.log" 2>&1 || status=1
fi
if has tp; then
  # Tensor-parallel layers on every GPU: fused vs cuBLASLt + NCCL vs torch (matmul + NCCL,
  # symmetric-memory fused ops), M from 16 to 16384 (TP_TOKENS), both models.
  tokens=${TP_TOKENS:-16,128,1024,4096,16384,32768}
  $bin bench tp --model all --m "$tokens" --tune-table "$out/tp_tune.tsv" --json "$out/tp_1x${ngpu}.json" \
    >"$out/tp_sweep.log" 2>&1 || status=1
  torchrun --standalone --nproc_per_node "$ngpu" bench/anchors/torch_tp.py --model all --tokens "$tokens" \
    --json "$out/tp_1x${ngpu}_torch.json" >"$out/torch_tp.log" 2>&1 || status=1
  # The planner with the tuning table the sweep wrote against the unfused pair.
  TESSERA_TP_TUNE_TABLE="$out/tp_tune.tsv" $bin bench tp --model all --m "$tokens" --impls auto,unfused \
    --json "$out/tp_auto_1x${ngpu}.json" >"$out/tp_auto.log" 2>&1 || status=1
fi
if has llm; then
  if [ "$ngpu" -ge 2 ]; then
    for tp in 1 "$ngpu"; do for b in 1 16; do
      $bin run llm --config llama3-70b --layers 8 --tp "$tp" --batch "$b" --prompt-len 1024 --gen 32 \
        --json "$out/llm_70b8l_tp${tp}_b${b}.json" >>"$out/llm.log" 2>&1 || status=1
    done; done
  else
    for b in 1 16; do
      $bin run llm --config llama3-8b --batch "$b" --prompt-len 4096 --gen 64 \
        --json "$out/llm_8b_b${b}.json" >>"$out/llm.log" 2>&1 || status=1
    done
    if python3 -c "import transformers" 2>/dev/null; then
      python3 bench/anchors/transformers_llm.py --batch 1,16 --prompt-len 4096 --gen 64 --compile \
        --json "$out/llm_8b_transformers.json" >"$out/llm_transformers.log" 2>&1 || status=1
    fi
  fi
fi
if has dit; then
  # One Flux.1-dev-shaped denoising step (J 512 text tokens): on one GPU beside diffusers eager
  # (torch_flux_step.py), on several with every sequence-parallel method beside the torch USP
  # peer (torch_flux_usp_step.py, Ulysses over every GPU). diffusers comes as a wheel in .whl/.
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl >"$out/pip.log" 2>&1 || status=1
  for seq in ${DIT_SEQ:-4096 16384}; do
    $bin run dit --model flux --seq "$seq" --text 512 --sp "$([ "$ngpu" -ge 2 ] && echo all || echo auto)" \
      --json "$out/dit_flux_L${seq}.json" >>"$out/dit.log" 2>&1 || status=1
  done
  seqs=$(echo ${DIT_SEQ:-4096 16384} | tr ' ' ,)
  if [ "$ngpu" -ge 2 ]; then
    PYTHONPATH=/tmp/site torchrun --standalone --nproc_per_node "$ngpu" bench/anchors/torch_flux_usp_step.py \
      --seq "$seqs" --text 512 --json "$out/dit_flux_torch_usp.json" >"$out/dit_torch.log" 2>&1 || status=1
  else
    PYTHONPATH=/tmp/site python3 bench/anchors/torch_flux_step.py --seq "$seqs" --text 512 \
      --json "$out/dit_flux_torch.json" >"$out/dit_torch.log" 2>&1 || status=1
  fi
fi
if has sched; then
  # The scheduler's strategies side by side (writing the rule's table), then the rule beside
  # them: on one GPU Llama-3-8B on steps mixing decodes and prompts (NanoFlow's setting; its SM
  # shares and GEMM window as docs/PERF.md measured them, and its split by overlap cost at K 1000
  # cached positions a row, the best of 600, 850 and 1000 on 12-06), and a decode-heavy 8192-row
  # step, each on as many layers as its caches fit (3072 decodes at context 1024: 13 GB a layer,
  # 8 layers on an H200's 141 GB, 4 on an H100's 80; 6144 decodes: 26 GB a layer, 4 and 2); on
  # several GPUs a Llama-3-70B-shaped stack at TP N. Each run's rows go into one table, keyed by
  # their mix.
  gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  big_gpu=$([ "${gpu_mib:-0}" -ge 120000 ] && echo 1 || echo 0)
  mix_layers=$([ "$big_gpu" = 1 ] && echo 8 || echo 4)
  heavy_layers=$([ "$big_gpu" = 1 ] && echo 4 || echo 2)
  if [ "$ngpu" -ge 2 ]; then
    runs=("--config llama3-70b --layers 8 --tp $ngpu --tokens 64,2048,8192")
    strategies=all
  else
    runs=("--config llama3-8b --layers $mix_layers --tokens 64,2048,4096,8192 --decode 64,1536,3072,3072 --context 1024"
      "--config llama3-8b --layers $heavy_layers --tokens 8192 --decode 6144 --context 1024")
    strategies=sequential,nanoflow:60,nanoflow:60:2,nanoflow:60:0:1000,dual_batch,tokenweave
  fi
  for i in "${!runs[@]}"; do
    read -r -a model <<<"${runs[$i]}"
    $bin bench sched "${model[@]}" --strategies "$strategies" --tune-table "$out/sched_tune.tsv" \
      --json "$out/sched_$i.json" >"$out/sched_$i.log" 2>&1 || status=1
  done
  [ "$strategies" = all ] && strategies=sequential,nanoflow,dual_batch,tokenweave
  for i in "${!runs[@]}"; do
    read -r -a model <<<"${runs[$i]}"
    TESSERA_SCHED_TUNE_TABLE="$out/sched_tune.tsv" $bin bench sched "${model[@]}" \
      --strategies "$strategies,auto" --json "$out/sched_auto_$i.json" >>"$out/sched_auto.log" 2>&1 ||
      status=1
  done
fi
if has python; then
  scripts/gpu_python.sh "$out" || status=1
fi
if has sanitize; then
  scripts/gpu_sanitize.sh build-gpu/tests/tessera_gpu_tests "$out" || status=1
fi
tar czf "$final/gpu-check.tgz" -C "$out" .
[ -f "$out/cluster.log" ] && { echo "=== cluster ==="; grep -v "^\[" "$out/cluster.log" | tail -45; }
[ -f "$out/decode.log" ] && { echo "=== decode ==="; grep -v "^\[" "$out/decode.log" | tail -30; }
[ -f "$out/decode_flashinfer.log" ] && { echo "=== decode flashinfer ==="; tail -20 "$out/decode_flashinfer.log"; }
[ -f "$out/decode_flashinfer_mla.log" ] && { echo "=== decode flashinfer MLA ==="; tail -12 "$out/decode_flashinfer_mla.log"; }
[ -f "$out/gemm.log" ] && { echo "=== gemm ==="; grep -v "^\[" "$out/gemm.log" | tail -40; }
[ -f "$out/tp_loopback.log" ] && { echo "=== tp loopback ==="; grep -v "^\[" "$out/tp_loopback.log" | tail -40; }
[ -f "$out/tp.log" ] && { echo "=== tp ==="; grep -v "^\[" "$out/tp.log" | tail -20; }
[ -f "$out/dit.log" ] && { echo "=== dit ==="; grep -v "^\[" "$out/dit.log" | tail -20; tail -4 "$out/dit_torch.log"; }
[ -f "$out/tp_sweep.log" ] && { echo "=== tp sweep ==="; grep -v "^\[" "$out/tp_sweep.log" | tail -90; }
[ -f "$out/torch_tp.log" ] && { echo "=== torch tp ==="; tail -70 "$out/torch_tp.log"; }
[ -f "$out/tp_auto.log" ] && { echo "=== tp auto ==="; grep -v "^\[" "$out/tp_auto.log" | tail -50; }
[ -f "$out/sched_auto.log" ] && { echo "=== sched ==="; grep -v "^\[" "$out/sched_auto.log" | tail -32; }
[ -f "$out/llm.log" ] && { echo "=== llm ==="; grep -E "^# tessera run llm|prefill|per output token|roofline" "$out/llm.log"; }
[ -f "$out/llm_transformers.log" ] && { echo "=== transformers ==="; tail -8 "$out/llm_transformers.log"; }
[ -f "$out/sanitize.txt" ] && { echo "=== sanitize ==="; cat "$out/sanitize.txt"; }
[ -f "$out/comm.log" ] && { echo "=== comm ==="; python3 bench/report.py "$out"/comm*.json "$out"/torch_comm.json | grep -E " (64M|256M) "; }
[ -f "$out/attn.log" ] && { echo "=== attn ==="; grep -v "^\[" "$out/attn.log" | tail -30; }
[ -f "$out/sp.log" ] && { echo "=== sp ==="; grep -v "^\[" "$out/sp.log" | tail -40; }
[ -f "$out/sp_sweep.log" ] && { echo "=== sp sweep ==="; grep -E "^(#|  )" "$out/sp_sweep.log" | grep -v "^# method"; }
[ -f "$out/usp.log" ] && { echo "=== torch USP ==="; grep -E "^RESULT|Error|error" "$out/usp.log" | head -20; }
exit $status
