"""Tensor-parallel GEMMs with their communication (Flux): plan once per layer shape, call per
layer with this rank's operands.

See :class:`Operation` (on a rank context) and :class:`Loopback` (every rank of a fused
operation in this process on one GPU). ops: ag_gemm (AllGather+GEMM: QKV, MLP gate/up), gemm_rs
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


class Loopback(_C.tp.Loopback):
    __doc__ = _C.tp.Loopback.__doc__

    def __call__(self, a, b, bias=None, *, out=None, stream=None):
        """Runs every rank: a, b (and bias) are lists of one cuda array per rank, shaped as
        shapes(rank) says; returns out, a list of rank r's results (made by a[0]'s
        framework when not given). stream: a cudaStream_t as an int (None: the current stream
        of a[0]'s framework)."""
        if out is None:
            out = [new_array(a[0], self.shapes(r)["out"], self.dtype) for r in range(len(a))]
        if stream is None:
            stream = default_stream(a[0])
        super().__call__([exported(x) for x in a], [exported(x) for x in b],
                         None if bias is None else [exported(x) for x in bias],
                         out=[exported(x) for x in out], stream=stream)
        return out


__all__ = ["Loopback", "Operation"]
