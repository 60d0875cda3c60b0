# Type stubs for tessera.tp (python/src/tp_operation.cc, python/src/tp_loopback.cc).
from typing import Any, Optional

from ._C import ArrayLike, RankContext

class Operation:
    """A tensor-parallel GEMM with its communication (Flux), planned once and called per layer
    on every rank.

    ag_gemm: a [m_r, K], b [N/P, K] (nk) -> out [M, N/P]; gemm_rs: a [M, K/P], b [N, K/P] ->
    out [m_r, N]; gemm_a2a: a [m_r, K], b [N, K] -> out [M, N/P]. m_r: this rank's share of the
    M rows (``rows``).
    """

    def __init__(
        self,
        ctx: RankContext,
        *,
        op: str,
        m: int,
        n: int,
        k: int,
        dtype: Any = "bfloat16",
        out_dtype: Any = None,
        weight_layout: str = "nk",
        bias: bool = False,
        fuse: str = "auto",
        comm_rows: int = -1,
    ) -> None:
        """Plans `op` across ctx's ranks (collective: every rank passes the same arguments).

        fuse: auto (the planner's pick; the unfused pair where fusion would lose or the backend
        has no fused form), fused or unfused.
        """

    def __call__(
        self,
        a: ArrayLike,
        b: ArrayLike,
        bias: Optional[ArrayLike] = None,
        *,
        out: Optional[ArrayLike] = None,
        stream: Optional[int] = None,
    ) -> Any:
        """Runs the operation on this rank's operands; returns out. Collective."""

    @property
    def shapes(self) -> dict[str, Any]:
        """{'a': (rows, cols), 'b': (rows, cols), 'bias': length or 0, 'out': (rows, cols)}."""
    @property
    def rows(self) -> tuple[int, int]:
        """(begin, count): this rank's share of the M rows."""
    @property
    def fused(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def out_dtype(self) -> str: ...
    @property
    def summary(self) -> str: ...
    def plan_json(self) -> str: ...

class Loopback:
    """A fused tensor-parallel operation (ag_gemm, gemm_rs, gemm_a2a) of `ranks` ranks in this
    process on one GPU (each rank's kernels on 1/ranks of the multiprocessors): checks the fused
    operations without several GPUs.

    Rank r's operands as shapes(r) says (ag_gemm: a [m_r, K], b [N/P, K] -> out [M, N/P]).
    Raises UnsupportedError without a cuda build.
    """

    def __init__(
        self,
        *,
        op: str = "ag_gemm",
        m: int,
        n: int,
        k: int,
        ranks: int = 4,
        dtype: Any = "bfloat16",
        bias: bool = False,
        device: int = 0,
        comm_rows: int = 0,
    ) -> None: ...
    def __call__(
        self,
        a: list[ArrayLike],
        b: list[ArrayLike],
        bias: Optional[list[ArrayLike]] = None,
        *,
        out: Optional[list[ArrayLike]] = None,
        stream: Optional[int] = None,
    ) -> list[Any]:
        """Runs every rank on its operands (lists, one cuda array per rank); returns out."""
    def shapes(self, rank: int) -> dict[str, Any]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def gemm_config(self) -> str: ...
