"""Outputs and streams in the caller's framework.

On the cpu, Tessera allocates the outputs it returns itself (when no `out` is given) as NumPy
arrays, so the extension links no framework. A caller who passed PyTorch tensors gets PyTorch
tensors back, the same memory through DLPack (bfloat16 bit patterns viewed as bfloat16). On a
GPU, outputs come from the inputs' framework (torch.empty_like, cupy.empty_like) and calls run
on its current stream unless the caller names others. The framework is the one the inputs came
from, already imported by the caller: nothing is imported here.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


# Per type of array: its framework's name, and how it crosses into the extension. Learnt on
# first sight of a type, so a call pays a dictionary lookup, not string work (the per-call
# overhead: docs/PERF.md, "Python calls").
_FRAMEWORK_OF: dict = {}
_EXPORTER_OF: dict = {}
_UNSEEN = object()


def _framework(sample: Any) -> str:
    tp = type(sample)
    name = _FRAMEWORK_OF.get(tp)
    if name is None:
        name = _FRAMEWORK_OF[tp] = tp.__module__.split(".")[0]
    return name


def like_input(sample: Any, result: Any) -> Any:
    """`result` (an array or a tuple of them) in `sample`'s framework where Tessera made it."""
    if _framework(sample) != "torch":
        return result
    torch = sys.modules["torch"]

    def convert(a: Any) -> Any:
        if not isinstance(a, np.ndarray):
            return a  # the caller's own `out`, or not an array
        t = torch.from_dlpack(a)
        if sample.dtype == torch.bfloat16 and a.dtype == np.uint16:
            t = t.view(torch.bfloat16)
        return t

    return tuple(convert(a) for a in result) if isinstance(result, tuple) else convert(result)


def _on_cuda(sample: Any) -> bool:
    if _framework(sample) == "torch":
        return sample.is_cuda
    return _framework(sample) == "cupy"  # CuPy arrays live on a GPU


def exported(x: Any) -> Any:
    """`x` as it crosses into the extension: a torch tensor as the DLPack capsule of torch's C
    exporter (torch.utils.dlpack.to_dlpack, well under a microsecond), where the protocol method
    x.__dlpack__() that nanobind calls otherwise runs Python code costing microseconds per
    tensor, several per call; anything else (None included) unchanged. The capsule shares x's
    memory."""
    tp = type(x)
    export = _EXPORTER_OF.get(tp, _UNSEEN)
    if export is _UNSEEN:
        torch_type = _framework(x) == "torch"
        export = _EXPORTER_OF[tp] = sys.modules["torch"].utils.dlpack.to_dlpack if torch_type else None
    return x if export is None else export(x)


def default_stream(sample: Any) -> int:
    """The stream a call on `sample` runs on when the caller names none: the framework's
    current stream for torch and CuPy arrays on a GPU (so the call orders with the framework's
    own work, and is captured by torch.cuda.graph), else 0 (cpu, or the legacy default
    stream, which orders with every blocking stream)."""
    if _framework(sample) == "torch" and sample.is_cuda:
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Triton calls: fast
        if raw is not None:
            return raw(sample.get_device())
        return torch.cuda.current_stream(sample.device).cuda_stream
    if _framework(sample) == "cupy":
        return sys.modules["cupy"].cuda.get_current_stream().ptr
    return 0


def new_output(sample: Any) -> Any:
    """An uninitialized array like `sample` from its own framework's allocator where `sample`
    lives on a GPU (Tessera allocates no device memory itself); None elsewhere (Tessera then
    returns a new NumPy array on the cpu, or says that cuda needs `out`)."""
    if not _on_cuda(sample):
        return None
    if _framework(sample) == "torch":
        torch = sys.modules["torch"]
        return torch.empty_like(sample, memory_format=torch.contiguous_format)
    return sys.modules["cupy"].empty_like(sample, order="C")


_TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
_DTYPE_CODES = {full: code for code, full in _TORCH_DTYPES.items()}


def dtype_code(name: str) -> str | None:
    """Tessera's code for a dtype name ("bfloat16" -> "bf16"); None for a name it does not
    know (the extension then names the argument)."""
    return _DTYPE_CODES.get(name)


def new_array(sample: Any, shape: tuple, dtype: str) -> Any:
    """An uninitialized `shape` array of Tessera's `dtype` ("f32", "f16", "bf16") from
    `sample`'s framework, on its GPU, where `sample` lives on one; None elsewhere (as
    new_output)."""
    if not _on_cuda(sample):
        return None
    if _framework(sample) == "torch":
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=getattr(torch, _TORCH_DTYPES[dtype]), device=sample.device)
    return sys.modules["cupy"].empty(shape, dtype=_TORCH_DTYPES[dtype])  # no bf16: CuPy says so


def new_bytes(sample: Any, count: int) -> Any:
    """`count` bytes of scratch from `sample`'s framework on its GPU; None elsewhere."""
    if not _on_cuda(sample):
        return None
    if _framework(sample) == "torch":
        torch = sys.modules["torch"]
        return torch.empty(max(count, 1), dtype=torch.uint8, device=sample.device)
    return sys.modules["cupy"].empty(max(count, 1), dtype="uint8")
