"""tessera.run_cpu_ranks: rank threads, their contexts, and how their failures surface."""

import threading
import time

import numpy as np
import pytest

import tessera


def test_returns_every_rank_value_by_rank():
    assert tessera.run_cpu_ranks(3, lambda ctx: (ctx.rank, ctx.size, ctx.backend)) == [
        (0, 3, "cpu"),
        (1, 3, "cpu"),
        (2, 3, "cpu"),
    ]


def test_machines_group_the_ranks():
    assert tessera.run_cpu_ranks(4, lambda ctx: ctx.num_machines, machines=2) == [2] * 4


def test_ranks_meet_in_cpp_without_holding_the_gil():
    # Each rank waits in a barrier for all others: this finishes only if a rank waiting in
    # C++ lets the others run Python meanwhile. Ranks also run as distinct threads.
    threads = set()

    def rank(ctx):
        threads.add(threading.get_ident())
        for _ in range(5):
            ctx.barrier()
        return ctx.rank

    assert tessera.run_cpu_ranks(4, rank) == [0, 1, 2, 3]
    assert len(threads) == 4 and threading.get_ident() not in threads


def test_a_rank_exception_names_the_rank_and_keeps_the_cause():
    def rank(ctx):
        if ctx.rank == 2:
            raise ValueError("bad input on this rank")
        return ctx.rank

    with pytest.raises(tessera.RankError) as info:
        tessera.run_cpu_ranks(4, rank)
    e = info.value
    assert "rank 2 of 4 raised ValueError: bad input on this rank" in str(e)
    assert e.rank == 2 and isinstance(e.__cause__, ValueError)
    assert set(e.errors) == {2}


def test_ranks_waiting_for_a_failed_rank_stop_at_once():
    # Rank 1 fails before a collective the others wait in: they get a peer failure naming it
    # (not a timeout), and the error reported is rank 1's own.
    q = np.zeros((1, 8, 2, 4), dtype=np.float32)

    def rank(ctx):
        if ctx.rank == 1:
            raise KeyError("rank one gives up")
        tessera.sp.Attention(ctx, seq_len=8, heads=2, head_dim=4, method="ring")
        return q

    start = time.monotonic()
    with pytest.raises(tessera.RankError) as info:
        tessera.run_cpu_ranks(3, rank)
    assert time.monotonic() - start < 10  # TESSERA_TIMEOUT_MS is 20 s in these tests
    e = info.value
    assert e.rank == 1 and isinstance(e.__cause__, KeyError)
    assert str(e).startswith("rank 1 of 3 raised KeyError")
    assert set(e.errors) == {0, 1, 2}
    for r in (0, 2):
        assert isinstance(e.errors[r], tessera.PeerFailureError)
        assert "rank 1" in str(e.errors[r])


def test_tessera_errors_on_a_rank_keep_their_class():
    def rank(ctx):
        tessera.sp.Attention(ctx, seq_len=8, heads=2, head_dim=4, method="ring" if ctx.rank else "bogus")

    with pytest.raises(tessera.RankError) as info:
        tessera.run_cpu_ranks(2, rank)
    assert info.value.rank == 0
    assert isinstance(info.value.__cause__, tessera.InvalidArgumentError)
    assert "method = 'bogus'" in str(info.value)


def test_context_and_layers_end_with_the_rank_function():
    kept = {}

    def rank(ctx):
        kept["ctx"] = ctx
        kept["layer"] = tessera.sp.Attention(ctx, seq_len=4, heads=1, head_dim=4, method="ring")
        assert ctx.is_open

    tessera.run_cpu_ranks(1, rank)
    assert not kept["ctx"].is_open
    with pytest.raises(tessera.InvalidArgumentError, match="ctx: its rank context has ended"):
        kept["ctx"].rank
    q = np.zeros((1, 4, 1, 4), dtype=np.float32)
    with pytest.raises(tessera.InvalidArgumentError, match="rank context has ended"):
        kept["layer"](q, q, q)


def test_world_size_and_fn_are_checked():
    with pytest.raises(tessera.InvalidArgumentError, match="world_size = 0: expected >= 1"):
        tessera.run_cpu_ranks(0, lambda ctx: None)
    with pytest.raises(TypeError, match="fn: int object: expected a callable"):
        tessera.run_cpu_ranks(2, 5)


def test_a_rank_thread_context_is_not_closed_by_hand():
    def rank(ctx):
        assert ctx.device == "cpu"
        with pytest.raises(tessera.InvalidArgumentError, match="belongs to tessera.run_cpu_ranks"):
            ctx.close()
        return ctx.is_open

    assert tessera.run_cpu_ranks(2, rank) == [True, True]


@pytest.mark.skipif("cuda" in tessera.info()["backends"], reason="this build has cuda")
def test_cuda_context_is_refused_by_a_cpu_build():
    with pytest.raises(tessera.UnsupportedError, match="no cuda backend"):
        tessera.cuda_context()
