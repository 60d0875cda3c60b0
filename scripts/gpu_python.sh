#!/usr/bin/env bash
# The Python package on the GPU machine (the `python` stage of scripts/gpu_check.sh): builds it
# with pip against build-gpu's library (TESSERA_CUDA=ON, TESSERA_LIBRARY_FROM), runs pytest over
# python/tests with the image's torch (the cuda tests included), then bench/python_overhead.py,
# and on several GPUs python/tests/torchrun_sp_check.py under torchrun, a process a GPU.
#   scripts/gpu_python.sh OUTDIR    -> OUTDIR/python_pytest.log, python_overhead.{log,json},
#                                      python_torchrun.log
# The machine has no network: the build tools and test tools come as wheels in .whl/ (`pip
# download --no-deps` where there is one: scikit-build-core, pathspec, packaging, nanobind,
# pytest, iniconfig, pluggy, pygments, diffusers), installed into /tmp/site.
set -uo pipefail
out=$1
site=/tmp/tessera-site
status=0
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$out/python_pip.log" 2>&1 || { echo "wheels failed"; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
rm -rf "$site"
TESSERA_CUDA=ON TESSERA_LIBRARY_FROM="$PWD/build-gpu" python3 -m pip install -q \
  --no-build-isolation --no-deps --no-index --target "$site" \
  -C cmake.define.CUTLASS_INCLUDE_DIR="$PWD/.deps/cutlass/include" ./python \
  >>"$out/python_pip.log" 2>&1 || { echo "pip install ./python failed"; tail -20 "$out/python_pip.log"; exit 1; }
export PYTHONPATH=$site:$PYTHONPATH
python3 -m pytest -q -p no:cacheprovider -rs python/tests >"$out/python_pytest.log" 2>&1 || status=1
tail -3 "$out/python_pytest.log"
python3 bench/python_overhead.py --json "$out/python_overhead.json" >"$out/python_overhead.log" 2>&1 || status=1
cat "$out/python_overhead.log"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -ge 2 ]; then  # sequence-parallel attention from Python, one process a GPU
  python3 -m torch.distributed.run --standalone --nproc-per-node "$ngpu" \
    python/tests/torchrun_sp_check.py >"$out/python_torchrun.log" 2>&1 || status=1
  grep -E "WRONG|Error|error" "$out/python_torchrun.log" | head -10
  echo "torchrun, $ngpu ranks: $(grep -c " ok$" "$out/python_torchrun.log") method runs ok, $(grep -c WRONG "$out/python_torchrun.log") wrong"
fi
exit $status
