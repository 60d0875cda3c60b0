# Type stubs for the extension module tessera._C (python/src/*.cc). Arrays are any DLPack
# producer (NumPy, PyTorch, CuPy, JAX); returned arrays are NumPy (cpu backend).
from typing import Any, Callable, Mapping, Optional

import numpy as np
import numpy.typing as npt

ArrayLike = Any  # any object with __dlpack__ (or the buffer protocol): [B, L, H, D]

error_code_keys: list[str]
sp: Any  # the classes of tessera.sp (see sp.pyi)
tp: Any  # the classes of tessera.tp (see tp.pyi)
decode: Any  # the classes of tessera.decode (see decode.pyi)
sched: Any  # tessera.sched's functions and ScheduleContext (see sched.pyi)
_testing: Any

def _register_error_classes(classes: Mapping[str, type]) -> None: ...
def info() -> dict[str, Any]:
    """What this build of Tessera contains: version, backends, build details, visible GPUs
    and every environment parameter (name, value, default, help)."""

def attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    causal: bool = False,
    softmax_scale: Optional[float] = None,
    q_start: int = 0,
    kv_start: int = 0,
    out: Optional[ArrayLike] = None,
    return_lse: bool = False,
    stream: int = 0,
) -> Any:
    """Local attention o = softmax(scale * q k^T) v.

    q [B, Lq, Hq, D], k and v [B, Lkv, Hkv, D] with Hq % Hkv == 0 (GQA); float32, float16 or
    bfloat16 (NumPy: uint16 bit patterns); unit stride in D, any other strides. causal masks
    key position kv_start + j > query position q_start + i. Returns out (when None: a new
    array of q's dtype, NumPy on the cpu, from q's framework on a GPU), and with
    return_lse=True the tuple (out, lse float32 [B, Hq, Lq]) (cpu only). stream: a
    cudaStream_t as an int for cuda arrays (None: the current stream of q's framework, torch
    or CuPy), 0 on cpu. These defaults are tessera.attention's: _C.attention itself needs `out`
    on a GPU and runs on stream 0 unless told.
    """

def attention_varlen(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    cu_seqlens_q: ArrayLike,
    cu_seqlens_k: ArrayLike,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    softmax_scale: Optional[float] = None,
    out: Optional[ArrayLike] = None,
    return_lse: bool = False,
    stream: int = 0,
) -> Any:
    """Attention of B sequences of different lengths packed along one token axis
    (FlashAttention's varlen API).

    q [total_q, Hq, D], k and v [total_k, Hkv, D]; sequence b owns rows cu_seqlens_q[b] ..
    cu_seqlens_q[b + 1] of q and cu_seqlens_k[b] .. cu_seqlens_k[b + 1] of k and v (int32
    [B + 1], on q's device) and attends within itself; max_seqlen_q / max_seqlen_k bound the
    lengths. causal aligns bottom-right (query i sees key j when j <= i + Lk - Lq). dtypes, out,
    stream as in attention; with return_lse=True the tuple (out, lse float32 [Hq, total_q])
    (cpu only). On a GPU the kernel reads cu_seqlens on the device: their values are not
    checked (out-of-range entries are clamped, rows past max_seqlen_q come out NaN), and k, v
    must be finite everywhere.
    """

def attention_fp8(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    descale_q: ArrayLike,
    descale_k: ArrayLike,
    descale_v: ArrayLike,
    *,
    causal: bool = False,
    softmax_scale: Optional[float] = None,
    q_start: int = 0,
    kv_start: int = 0,
    out: Optional[ArrayLike] = None,
    out_dtype: Any = "bfloat16",
    workspace: Optional[ArrayLike] = None,
    return_lse: bool = False,
    stream: int = 0,
) -> Any:
    """FP8 (e4m3) attention with per-head descales: q, k, v float8_e4m3fn (or uint8 bit
    patterns), descale_q [Hq], descale_k and descale_v [Hkv] float32; out bfloat16 on a GPU."""

def fp8_workspace_bytes(v: ArrayLike, *, stream: int = 0) -> int:
    """Workspace bytes attention_fp8 needs for v on the stream's device (0 on the cpu)."""

def quantize_fp8(x: ArrayLike) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.float32]]:
    """Per-head e4m3 quantization of a cpu x [B, L, H, D]: (x8 bit patterns, descales [H])."""

def reference_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    causal: bool = False,
    softmax_scale: Optional[float] = None,
    q_start: int = 0,
    kv_start: int = 0,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Tessera's float32 reference on cpu arrays: (o [B, Lq, Hq, D], lse [B, Hq, Lq])."""

class RankContext:
    """One rank: a rank thread of tessera.run_cpu_ranks (valid only inside the function it
    runs), or this process's rank from tessera.cuda_context() (valid until close())."""

    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def num_machines(self) -> int: ...
    @property
    def backend(self) -> str: ...
    @property
    def device(self) -> str:
        """'cpu', or 'cuda:N' (N = the local rank)."""
    @property
    def is_open(self) -> bool: ...
    def barrier(self) -> None:
        """Waits until every rank arrived (bounded by TESSERA_TIMEOUT_MS)."""
    def close(self) -> None:
        """Ends a context from tessera.cuda_context() (collective, idempotent)."""
    def __enter__(self) -> "RankContext": ...
    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None: ...

def _cuda_context(heap_bytes: int, heap_transport: str, machines: int) -> RankContext: ...

def _run_cpu_ranks(
    world_size: int,
    body: Callable[[RankContext], tuple[bool, Any, str, str]],
    machines: int,
    heap_bytes: int,
) -> list[Optional[tuple[bool, Any, str, str]]]: ...
