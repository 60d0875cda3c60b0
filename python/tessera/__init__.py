"""Tessera: overlapped distributed transformer inference for Hopper GPUs, from Python.

Tensors cross through DLPack (NumPy on the cpu backend; PyTorch, CuPy or JAX arrays through
the same protocol), so the package links no framework's C++ ABI::

    import numpy as np, tessera
    q = k = v = np.random.rand(1, 128, 8, 64).astype(np.float32)   # [B, L, H, D]
    o = tessera.attention(q, k, v, causal=True)

    def rank(ctx):                                                  # on each of 4 ranks
        layer = tessera.sp.Attention(ctx, seq_len=128, heads=8, head_dim=64, method="auto")
        rows = layer.local_tokens                                   # this rank's tokens
        return rows, layer(q[:, rows], k[:, rows], v[:, rows])
    shards = tessera.run_cpu_ranks(4, rank)

On a GPU, torch or CuPy arrays run on the framework's current stream, and outputs come from
its allocator; ``tessera.cuda_context()`` is this process's rank (torchrun, mpirun or alone).

Errors raise :class:`tessera.Error` subclasses (InvalidArgumentError is also a ValueError)
with messages that name the argument and what was expected.
"""

from __future__ import annotations

import sys

from . import _C
from ._errors import (
    CudaError,
    Error,
    InternalError,
    InvalidArgumentError,
    NcclError,
    NvshmemError,
    PeerFailureError,
    RankError,
    SystemError,
    TimeoutError,
    UnsupportedError,
    ERROR_CLASSES as _ERROR_CLASSES,
)
from ._frameworks import default_stream as _default_stream
from ._frameworks import _framework
from ._frameworks import dtype_code as _dtype_code
from ._frameworks import exported as _exported
from ._frameworks import like_input as _like_input
from ._frameworks import new_array as _new_array
from ._frameworks import new_bytes as _new_bytes
from ._frameworks import new_output as _new_output
from ._ranks import cuda_context, run_cpu_ranks
from . import decode, model, sched, sp, tp

_C._register_error_classes(_ERROR_CLASSES)

RankContext = _C.RankContext
reference_attention = _C.reference_attention


def attention(q, k, v, *, out=None, stream=None, return_lse=False, **kwargs):
    if out is None:
        out = _new_output(q)
    if stream is None:
        stream = _default_stream(q)
    result = _C.attention(_exported(q), _exported(k), _exported(v),
                          out=_exported(out), stream=stream,
                          return_lse=return_lse, **kwargs)
    if out is not None:  # the caller's (or the framework's) array, not the capsule it crossed as
        result = (out, result[1]) if return_lse else out
    return _like_input(q, result)


attention.__doc__ = _C.attention.__doc__


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                     out=None, stream=None, return_lse=False, **kwargs):
    if out is None:
        out = _new_output(q)
    if stream is None:
        stream = _default_stream(q)
    result = _C.attention_varlen(_exported(q), _exported(k), _exported(v),
                                 _exported(cu_seqlens_q), _exported(cu_seqlens_k), max_seqlen_q,
                                 max_seqlen_k, out=_exported(out), stream=stream,
                                 return_lse=return_lse, **kwargs)
    if out is not None:
        result = (out, result[1]) if return_lse else out
    return _like_input(q, result)


attention_varlen.__doc__ = _C.attention_varlen.__doc__

def _fp8_bits(x):
    """torch's float8_e4m3fn tensors as their uint8 bit patterns (what every DLPack consumer
    reads); anything else unchanged."""
    if _framework(x) == "torch" and str(x.dtype) == "torch.float8_e4m3fn":
        return x.view(sys.modules["torch"].uint8)
    return x


def attention_fp8(q, k, v, descale_q, descale_k, descale_v, *, out=None, out_dtype="bfloat16",
                  stream=None, return_lse=False, **kwargs):
    q, k, v = _fp8_bits(q), _fp8_bits(k), _fp8_bits(v)
    if out is None and _framework(q) == "torch":
        torch = sys.modules["torch"]
        out = torch.empty(tuple(q.shape), dtype=getattr(torch, out_dtype), device=q.device)
    elif out is None and (code := _dtype_code(out_dtype)) is not None:
        out = _new_array(q, tuple(q.shape), code)
    if stream is None:
        stream = _default_stream(q)
    workspace = _new_bytes(q, _C.fp8_workspace_bytes(_exported(v), stream=stream))
    result = _C.attention_fp8(_exported(q), _exported(k), _exported(v), _exported(descale_q),
                              _exported(descale_k), _exported(descale_v), out=_exported(out),
                              out_dtype=out_dtype, workspace=_exported(workspace), stream=stream,
                              return_lse=return_lse, **kwargs)
    if out is not None:
        result = (out, result[1]) if return_lse else out
    return result


attention_fp8.__doc__ = _C.attention_fp8.__doc__
quantize_fp8 = _C.quantize_fp8
info = _C.info

__version__: str = _C.info()["version"]

__all__ = [
    "CudaError",
    "Error",
    "InternalError",
    "InvalidArgumentError",
    "NcclError",
    "NvshmemError",
    "PeerFailureError",
    "RankContext",
    "RankError",
    "SystemError",
    "TimeoutError",
    "UnsupportedError",
    "attention",
    "attention_fp8",
    "attention_varlen",
    "cuda_context",
    "decode",
    "info",
    "model",
    "quantize_fp8",
    "reference_attention",
    "run_cpu_ranks",
    "sched",
    "sp",
    "tp",
]
