#!/usr/bin/env bash
# The sequence-parallel attention sweep behind docs/PERF.md (issue 4): every method side by
# side with `tessera bench sp`, on the real topology and on emulated machines, with the shapes
# of the StreamFusion paper, and the torch.distributed USP peer on the real topology.
#   scripts/sp_sweep.sh BIN OUTDIR           (run by scripts/gpu_check.sh's spsweep stage)
#   PARTS="flux1x4 cog1x4 usp 4x1paper 2x2 4x1nic 2x2paper 8gpu" selects parts (default: all;
#   8gpu runs only on 8 GPUs). Part names are for 4 GPUs; the emulated parts use every GPU
#   (4x1 becomes Nx1, 2x2 becomes 2x(N/2)) and name their JSON by the shape they ran.
# Between emulated machines every transfer crosses the emulated NICs: one-sided ones through the
# paced copy, two-sided (NCCL over the host's sockets) held to the link by the executor, so
# where the preset is slower than the sockets (paper) both kinds see the same link.
# Shapes: Flux-12B (H24 D128, L 36864 and 65536 image tokens + 512 joint text tokens) and
# CogVideoX as the paper gives it (H24 D64, L 65536 and 131072, no joint tokens).
set -uo pipefail
bin=$1
out=$2
mkdir -p "$out"
parts=${PARTS:-"flux1x4 cog1x4 usp 4x1paper 2x2 4x1nic 2x2paper 8gpu"}
has() { [[ " $parts " == *" $1 "* ]]; }
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
status=0
flux=(--heads 24 --head-dim 128 --joint 512)
cog=(--heads 24 --head-dim 64 --joint 0)
# Emulated machines: fewer timed runs (a slow link makes each run long).
slow=(--warmup 2 --iters 5)

sp() {  # sp NAME ARGS...: one bench sp run, log and JSON under OUTDIR
  local name=$1
  shift
  echo "--- bench sp $name: $*" >>"$out/sp_sweep.log"
  $bin bench sp "$@" --json "$out/sp_$name.json" >>"$out/sp_sweep.log" 2>&1 || status=1
}

has flux1x4 && sp "flux_1x${ngpu}" "${flux[@]}" --seq 36864,65536 --timeline "$out/tl_flux_1x${ngpu}"
has cog1x4 && sp "cog_1x${ngpu}" "${cog[@]}" --seq 65536,131072
if has usp; then
  for args in "--seq 36864,65536 ${flux[*]}" "--seq 65536,131072 ${cog[*]}"; do
    # shellcheck disable=SC2086
    torchrun --standalone --nproc_per_node "$ngpu" bench/anchors/torch_usp.py $args \
      --json "$out/usp_$(echo "$args" | tr -cd '0-9' | cut -c1-12).json" >>"$out/usp.log" 2>&1 || status=1
  done
fi
if [ "$ngpu" -ge 4 ]; then
  has 4x1paper && sp "flux_${ngpu}x1_paper" "${flux[@]}" --seq 36864 --emulate-nodes "$ngpu" --link paper \
    "${slow[@]}" --timeline "$out/tl_flux_${ngpu}x1_paper"
  has 4x1paper && sp "cog_${ngpu}x1_paper" "${cog[@]}" --seq 65536 --emulate-nodes "$ngpu" --link paper "${slow[@]}"
  has 2x2 && sp "flux_2x$((ngpu / 2))_nic400" "${flux[@]}" --seq 36864 --emulate-nodes 2 "${slow[@]}"
  has 4x1nic && sp "flux_${ngpu}x1_nic400" "${flux[@]}" --seq 36864 --emulate-nodes "$ngpu" "${slow[@]}" \
    --timeline "$out/tl_flux_${ngpu}x1_nic400"
  has 2x2paper && sp "flux_2x$((ngpu / 2))_paper" "${flux[@]}" --seq 36864 --emulate-nodes 2 --link paper "${slow[@]}"
fi
# Eight GPUs (issue 5): the parts above then run 1x8, 8x1 and 2x4; this adds 4x2 (both shapes)
# and CogVideoX on 2x4, on the paper link.
if [ "$ngpu" -ge 8 ] && has 8gpu; then
  sp "flux_4x$((ngpu / 4))_paper" "${flux[@]}" --seq 36864 --emulate-nodes 4 --link paper "${slow[@]}"
  for nodes in 2 4; do
    sp "cog_${nodes}x$((ngpu / nodes))_paper" "${cog[@]}" --seq 65536 --emulate-nodes "$nodes" --link paper "${slow[@]}"
  done
fi
exit $status
