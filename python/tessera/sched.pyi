# Type stubs for tessera.sched (python/src/sched.cc).
from typing import Optional

Step = tuple[int, str]  # (layer, op)

class ScheduleContext:
    """The steps of one forward's nano-batches, as a strategy's schedule() sees them (valid
    only while it runs)."""

    @property
    def num_nano_batches(self) -> int: ...
    def ready(self, n: int) -> Optional[Step]:
        """Nano-batch n's next step, or None once its chain is done."""
    def run(self, n: int, step: Step) -> None:
        """Runs `step` on nano-batch n; it must be ready(n)."""
    def run_next(self, n: int) -> None: ...
    def run_fused(self, n: int, first: Step, group: str, chunks: int = 1,
                  gemm_sm_percent: int = 100) -> None:
        """Runs the two steps from `first` as one fused operation (the model's) of kind `group`,
        which the strategy lists in its `fused_groups` attribute ("all_reduce_norm",
        "row_parallel_pair", "row_parallel_pipelined"; the last in `chunks` row chunks, its
        GEMMs on gemm_sm_percent of a GPU's multiprocessors)."""
    @property
    def finished(self) -> bool: ...
    @property
    def trace(self) -> list[tuple[int, int, str]]:
        """(nano-batch, layer, op) in the order they ran."""

def op_kind(op: str) -> str:
    """compute, memory or network."""
def strategies() -> list[str]: ...
def token_balanced_split(lengths: list[int], parts: int) -> list[int]:
    """Sequences per nano-batch of about equal tokens (at most `parts` nano-batches)."""
