"""Rank contexts: tessera.run_cpu_ranks (a Python function on P rank threads of the cpu
backend) and tessera.cuda_context (this process's rank on the cuda backend)."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from . import _C
from ._errors import Error, PeerFailureError, RankError

T = TypeVar("T")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _rank_error(errors: dict[int, BaseException], world_size: int) -> RankError:
    # The root cause: the lowest rank whose exception is not a report of another's failure.
    firsthand = [r for r, e in errors.items() if not isinstance(e, PeerFailureError)]
    root = min(firsthand) if firsthand else min(errors)
    cause = errors[root]
    lines = [f"rank {root} of {world_size} raised {type(cause).__name__}: {cause}"]
    for r in sorted(errors):
        if r != root:
            lines.append(f"  rank {r}: {type(errors[r]).__name__}: {_first_line(errors[r])}")
    return RankError("\n".join(lines), root, errors)


def run_cpu_ranks(
    world_size: int,
    fn: Callable[[_C.RankContext], T],
    *,
    machines: int = 1,
    heap_bytes: int = 64 << 20,
) -> list[T]:
    """Runs ``fn(ctx)`` on ``world_size`` threads, each a rank of the cpu backend.

    ``ctx`` (a :class:`tessera.RankContext`) gives ``rank`` and ``size`` and is what
    :class:`tessera.sp.Attention` plans on; it and every layer planned on it are valid only
    until ``fn`` returns. The ranks are split evenly into ``machines`` emulated machines (their
    links paced like a 400 Gb/s NIC). ``heap_bytes`` sizes each rank's symmetric heap (what
    one-sided plans allocate from). Returns every rank's return value, by rank.

    The GIL is released while ranks wait on each other, so their C++ work overlaps. If ``fn``
    raises on any rank, the other ranks' waits on it stop (PeerFailureError instead of a
    timeout) and :class:`tessera.RankError` is raised, naming the rank, with the exception
    as its ``__cause__``.
    """
    if not callable(fn):
        raise TypeError(f"fn: {type(fn).__name__} object: expected a callable fn(ctx)")

    def body(ctx: _C.RankContext) -> tuple[bool, Any, str, str]:
        try:
            return (True, fn(ctx), "", "")
        except BaseException as e:  # every rank's failure is reported, by rank, below
            code = e.code if isinstance(e, Error) else "python"
            return (False, e, code, f"{type(e).__name__}: {_first_line(e)}")

    outcomes = _C._run_cpu_ranks(world_size, body, machines, heap_bytes)
    errors = {r: o[1] for r, o in enumerate(outcomes) if o is not None and not o[0]}
    if errors:
        error = _rank_error(errors, world_size)
        raise error from errors[error.rank]
    # No rank failed, so every rank ran fn and returned (True, value, "", "").
    return [o[1] for o in outcomes if o is not None]


def cuda_context(
    *, heap_bytes: int = 1 << 30, heap_transport: str = "auto", machines: int = 1
) -> _C.RankContext:
    """This process's rank on the cuda backend, on GPU ``local_rank``.

    The ranks come from the launcher's variables: torchrun's (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT), mpirun's or srun's, or tessera's own launcher; with none, a world
    of one. Collective: every process calls it. It makes the world communicator (NCCL) and a
    symmetric heap of ``heap_bytes`` per rank (``heap_transport``: nvshmem, ipc or auto) that
    one-sided plans allocate from; ``machines`` > 1 regroups the ranks into emulated machines.
    Close it with ``ctx.close()`` or a ``with`` block; layers planned on it end with it::

        with tessera.cuda_context() as ctx:
            layer = tessera.sp.Attention(ctx, seq_len=L, heads=H, head_dim=D, dtype="bfloat16")
            out = layer(q, k, v)      # torch tensors on cuda:<local_rank>
    """
    return _C._cuda_context(heap_bytes, heap_transport, machines)
