# Type stubs for tessera.tp (python/src/tp_operation.cc).
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
