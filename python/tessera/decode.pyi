# Type stubs for tessera.decode (python/src/decode_block.cc).
from typing import Any, Mapping, Optional, Union

from ._C import ArrayLike

class AttentionBlock:
    """The attention block of one decode step (ClusterFusion): RMSNorm, QKV projection, RoPE,
    cache append, attention and output projection, planned once and called per step."""

    def __init__(
        self,
        model: Union[str, Mapping[str, Any]],
        *,
        max_batch: int = 1,
        max_context: int = 4096,
        dtype: Any = "bfloat16",
        paged: bool = False,
        page_size: int = 16,
        device: str = "cpu",
        impl: str = "auto",
        cluster_size: int = 0,
    ) -> None:
        """model: llama2-7b, llama3-8b, deepseek-v2-lite, or a dict of hidden, num_heads,
        num_kv_heads, head_dim (rope_theta, rms_norm_eps, name optional)."""

    def __call__(
        self,
        x: ArrayLike,
        positions: ArrayLike,
        weights: Mapping[str, ArrayLike],
        k_cache: ArrayLike,
        v_cache: Optional[ArrayLike] = None,
        *,
        page_table: Optional[ArrayLike] = None,
        out: Optional[ArrayLike] = None,
        workspace: Optional[ArrayLike] = None,
        stream: Optional[int] = None,
    ) -> Any:
        """One step for x [B, hidden] at positions int32 [B]; appends to the caches in place
        and returns out [B, hidden]."""

    @property
    def workspace_bytes(self) -> int: ...
    @property
    def cluster_size(self) -> int: ...
    @property
    def impl(self) -> str: ...
    @property
    def summary(self) -> str: ...
