"""Tensor-parallel GEMMs with their communication (Flux): plan once per layer shape, call per
layer with this rank's operands.

See :class:`Operation`. ops: ag_gemm (AllGather+GEMM: QKV, MLP gate/up), gemm_rs
(GEMM+ReduceScatter: attention output, MLP down), gemm_a2a (GEMM+AllToAll: Ulysses'
projection going head-sharded).
"""

from . import _C
from ._frameworks import default_stream, exported, like_input, new_array


class Operation(_C.tp.Operation):
    __doc__ = _C.tp.Operation.__doc__

    def __call__(self, a, b, bias=None, *, out=None, stream=None):
        if out is None:
            out = new_array(a, self.shapes["out"], self.out_dtype)
        if stream is None:
            stream = default_stream(a)
        result = super().__call__(exported(a), exported(b), exported(bias), out=exported(out),
                                  stream=stream)
        # An output given (or made by the framework) comes back as itself, not as its capsule.
        return like_input(a, result if out is None else out)

    __call__.__doc__ = _C.tp.Operation.__call__.__doc__


__all__ = ["Operation"]
