# Type stubs for tessera.sp (python/src/sp_attention.cc).
from typing import Any, Optional, Union

import numpy as np
import numpy.typing as npt

from ._C import ArrayLike, RankContext

class Attention:
    """Sequence-parallel attention, planned once and called per layer on every rank.

    Collective: every rank constructs it with the same arguments and calls it once per step
    with its shards q [B, L_r, H, D], k and v [B, L_r, Hkv, D], whose rows hold the image
    tokens ``local_tokens`` names.
    """

    def __init__(
        self,
        ctx: RankContext,
        *,
        seq_len: int,
        heads: int,
        head_dim: int,
        batch: int = 1,
        kv_heads: int = 0,
        dtype: Any = "float32",
        causal: bool = False,
        joint_tokens: int = 0,
        method: str = "auto",
        comm: str = "two-sided",
        layout: Optional[str] = None,
        ulysses_degree: int = 0,
        mesh_tile: Optional[tuple[int, int]] = None,
        softmax_scale: Optional[float] = None,
    ) -> None:
        """Plans attention over seq_len image tokens (plus joint_tokens replicated ones).

        method: auto (the sim executor times every method and keeps the fastest), ring,
        ulysses, usp, tas, torus or mesh. comm: two-sided or one-sided. layout: None (the
        method's default), contiguous, striped or zigzag. kv_heads: 0 for heads (GQA: a
        divisor). dtype: float32, float16 or bfloat16 (a string, NumPy or torch dtype).
        """

    def __call__(
        self,
        q: ArrayLike,
        k: ArrayLike,
        v: ArrayLike,
        *,
        out: Optional[ArrayLike] = None,
        joint_q: Optional[ArrayLike] = None,
        joint_k: Optional[ArrayLike] = None,
        joint_v: Optional[ArrayLike] = None,
        joint_out: Optional[ArrayLike] = None,
        stream: Optional[int] = None,
    ) -> Union[Any, tuple[Any, Any]]:
        """Runs the plan on this rank's shards; returns out [B, L_r, H, D], or (out,
        joint_out [B, J, H, D]) when the layer has joint tokens. Collective. Outputs left None
        are new arrays (NumPy on the cpu, from q's framework on a GPU); stream None: the
        current stream of q's framework (torch, CuPy) on a GPU, 0 on the cpu."""

    @property
    def local_tokens(self) -> npt.NDArray[np.int64]:
        """The image token (0 .. seq_len - 1) each local row holds, in row order."""
    @property
    def local_rows(self) -> int: ...
    @property
    def joint_tokens(self) -> int:
        """J: the replicated joint (text) tokens in front of the image tokens."""
    @property
    def method(self) -> str:
        """The method planned (what auto chose)."""
    @property
    def summary(self) -> str: ...
    @property
    def softmax_scale(self) -> float: ...
    def plan_json(self) -> str: ...
