"""tessera.sched from Python: every built-in strategy and strategies written here (alternating
nano-batches, an all-reduce fused with its norm, row-parallel pairs in row chunks) give bitwise
the logits of the plain forward of tessera.model.Llama; the steps run as the strategy said; a
step run too early, a context kept too long, a bad split, an unknown fused group and an object
that is no strategy raise, naming what is wrong; a step whose strategy fails caches nothing."""

import numpy as np
import pytest

import tessera

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [1, 2, 3], [40, 41, 42, 43, 44], [9]]


def logits(strategy):
    """A fresh tiny model (same seed): a mixed batch of prefills, then a decode step of all."""
    m = tessera.model.Llama("tiny", seed=3)
    seqs = [m.add_sequence() for _ in PROMPTS]
    first = m.forward(list(zip(seqs, PROMPTS)), strategy=strategy)
    second = m.forward([(s, [7]) for s in seqs], strategy=strategy)
    return np.concatenate([first, second])


class Alternate:
    """Two token-balanced nano-batches taking turns, one operation each."""

    name = "alternate"

    def __init__(self):
        self.traces = []

    def split(self, lengths):
        assert all(isinstance(n, int) and n >= 1 for n in lengths)
        return tessera.sched.token_balanced_split(lengths, 2)

    def schedule(self, ctx):
        while not ctx.finished:
            for n in range(ctx.num_nano_batches):
                if ctx.ready(n) is not None:
                    ctx.run_next(n)
        self.traces.append(ctx.trace)


class FusedAllReduceNorm:
    """One nano-batch; each all-reduce runs fused with the RMSNorm after it (TokenWeave's)."""

    fused_groups = ["all_reduce_norm"]

    def split(self, lengths):
        return None

    def schedule(self, ctx):
        while not ctx.finished:
            step = ctx.ready(0)
            layer, op = step
            if op == "o_all_reduce":
                ctx.run_fused(0, step, "all_reduce_norm")  # with mlp_norm
            else:
                ctx.run(0, step)


class PipelinedRowParallel:
    """One nano-batch; each row-parallel GEMM and its all-reduce in three row chunks."""

    fused_groups = ["row_parallel_pipelined"]

    def split(self, lengths):
        return None

    def schedule(self, ctx):
        while not ctx.finished:
            step = ctx.ready(0)
            if step[1] in ("o_proj", "down"):
                ctx.run_fused(0, step, "row_parallel_pipelined", chunks=3, gemm_sm_percent=80)
            else:
                ctx.run(0, step)


def test_every_order_gives_the_same_logits():
    want = logits(None)
    assert set(tessera.sched.strategies()) == {"sequential", "nanoflow", "dual_batch",
                                               "single_batch", "tokenweave"}
    for name in tessera.sched.strategies():
        assert np.array_equal(logits(name), want), name
    alternate = Alternate()
    assert np.array_equal(logits(alternate), want)
    assert np.array_equal(logits(FusedAllReduceNorm()), want)
    assert np.array_equal(logits(PipelinedRowParallel()), want)
    # A partition: the strategy orders only its steps, the rest run in chain order.
    assert np.array_equal(logits("dual_batch@layers=1/ops=attention+o_proj"), want)
    # The prefill made two nano-batches whose steps interleave, every step once.
    trace = alternate.traces[0]
    assert {n for n, _, _ in trace} == {0, 1}
    assert trace[0][0] == 0 and trace[1][0] == 1
    layers = tessera.model.Llama("tiny").num_layers
    assert len(trace) == 2 * layers * 9 and len(set(trace)) == len(trace)


def test_auto_runs_the_strategy_measured_fastest(tmp_path, monkeypatch):
    want = logits(None)
    # The tiny model (hidden 64) on the cpu: tokenweave measured fastest at 24 rows (within a
    # factor of 2 of the prefill's 16), nothing near the decode step's 4 (sequential runs).
    table = tmp_path / "sched_tune.tsv"
    table.write_text("cpu\t1\t64\t24\ttokenweave\t1.0\ncpu\t1\t64\t24\tsequential\t2.0\n")
    monkeypatch.setenv("TESSERA_SCHED_TUNE_TABLE", str(table))
    assert np.array_equal(logits("auto"), want)
    table.write_text("cpu\t1\t64\t24\tfastest\t1.0\n")
    with pytest.raises(tessera.InvalidArgumentError, match=r"sched_tune.tsv:1: .*a strategy"):
        logits("auto")


def test_op_kinds_and_the_split():
    assert [tessera.sched.op_kind(op) for op in ("qkv", "attention", "o_all_reduce")] == [
        "compute", "memory", "network"]
    assert tessera.sched.token_balanced_split([10, 10, 10, 10], 2) == [2, 2]
    assert tessera.sched.token_balanced_split([30, 1, 1, 1], 2) == [1, 3]
    with pytest.raises(tessera.InvalidArgumentError, match="op = 'mlp'"):
        tessera.sched.op_kind("mlp")


def run_once(strategy):
    m = tessera.model.Llama("tiny")
    return m.forward([(m.add_sequence(), [1, 2, 3]), (m.add_sequence(), [4])], strategy=strategy)


def test_a_step_run_too_early_names_what_it_waits_for():
    class Eager:
        def split(self, lengths):
            return None

        def schedule(self, ctx):
            ctx.run(0, (0, "attention"))  # before attn_norm and qkv

    with pytest.raises(tessera.InvalidArgumentError, match="attention"):
        run_once(Eager())


def test_a_context_kept_past_schedule_raises():
    kept = []

    class Keeper:
        def split(self, lengths):
            return [1, 1]

        def schedule(self, ctx):
            kept.append(ctx)
            for n in range(ctx.num_nano_batches):
                while ctx.ready(n) is not None:
                    ctx.run_next(n)

    run_once(Keeper())
    with pytest.raises(tessera.InvalidArgumentError, match="after its strategy's schedule"):
        kept[0].ready(0)


def test_bad_strategies_say_what_is_wrong():
    class Split:
        def __init__(self, counts):
            self.counts = counts

        def split(self, lengths):
            return self.counts

        def schedule(self, ctx):
            while not ctx.finished:
                ctx.run_next(0)

    with pytest.raises(tessera.InvalidArgumentError, match="take 1 of the batch's 2 sequences"):
        run_once(Split([1]))
    with pytest.raises(tessera.InvalidArgumentError, match="nano-batch 0 takes 0 sequences"):
        run_once(Split([0, 2]))
    with pytest.raises(tessera.InvalidArgumentError, match="expected a list of sequence counts"):
        run_once(Split("all"))
    with pytest.raises(tessera.InvalidArgumentError, match="without schedule"):
        run_once(object.__new__(type("NoSchedule", (), {"split": lambda self, n: None})))
    with pytest.raises(tessera.InvalidArgumentError, match="strategy = 'fast'"):
        run_once("fast")
    with pytest.raises(ZeroDivisionError):  # the strategy's own exception comes back as itself
        run_once(Split.__new__(type("Broken", (Split,), {"split": lambda self, n: 1 / 0})))
    # Fused groups: only the kinds a strategy lists in fused_groups, known names only.
    undeclared = FusedAllReduceNorm()
    undeclared.fused_groups = None
    with pytest.raises(tessera.InvalidArgumentError, match="the strategy did not declare"):
        run_once(undeclared)
    unknown = PipelinedRowParallel()
    unknown.schedule = lambda ctx: ctx.run_fused(0, ctx.ready(0), "fused")
    with pytest.raises(tessera.InvalidArgumentError, match="group: 'fused': expected all_reduce_norm"):
        run_once(unknown)
    undeclared.fused_groups = ["all_reduce"]
    with pytest.raises(tessera.InvalidArgumentError, match="fused_groups: 'all_reduce': expected"):
        run_once(undeclared)
    undeclared.fused_groups = "all_reduce_norm"
    with pytest.raises(tessera.InvalidArgumentError, match="expected a list of names"):
        run_once(undeclared)


def test_a_failed_step_caches_nothing():
    class FailsHalfway:
        def split(self, lengths):
            return None

        def schedule(self, ctx):
            for _ in range(5):  # into the first layer: its qkv has written the cache
                ctx.run_next(0)
            raise RuntimeError("the strategy gave up")

    m = tessera.model.Llama("tiny", seed=3)
    seqs = [m.add_sequence() for _ in PROMPTS]
    with pytest.raises(RuntimeError, match="gave up"):
        m.forward(list(zip(seqs, PROMPTS)), strategy=FailsHalfway())
    assert [m.length(s) for s in seqs] == [0] * len(PROMPTS)
    # The same steps again give what a model that never failed gives.
    first = m.forward(list(zip(seqs, PROMPTS)))
    second = m.forward([(s, [7]) for s in seqs])
    assert np.array_equal(np.concatenate([first, second]), logits(None))
