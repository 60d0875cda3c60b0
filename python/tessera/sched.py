"""The operator scheduler (DynaFlow): the order in which a forward's operations run over
nano-batches, apart from the model's definition.

Pass a built-in strategy's name (:func:`strategies`; on the cpu and cuda backends) or your own
object (cpu backend) to ``tessera.model.Llama.forward(..., strategy=...)``. Your own has two
methods::

    class Alternate:                        # two nano-batches, taking turns op by op
        name = "alternate"
        def split(self, lengths):           # each sequence's new tokens
            return tessera.sched.token_balanced_split(lengths, 2)
        def schedule(self, ctx):            # a ScheduleContext, valid during the call
            while not ctx.finished:
                for n in range(ctx.num_nano_batches):
                    if ctx.ready(n):
                        ctx.run_next(n)

A step is ``(layer, op)``; :func:`op_kind` says what bounds an op (compute, memory, network).
Every order gives bitwise the same logits; running a step before the one it needs raises.
"""

from . import _C

ScheduleContext = _C.sched.ScheduleContext
op_kind = _C.sched.op_kind
strategies = _C.sched.strategies
token_balanced_split = _C.sched.token_balanced_split

__all__ = ["ScheduleContext", "op_kind", "strategies", "token_balanced_split"]
