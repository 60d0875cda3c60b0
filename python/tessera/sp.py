"""Sequence-parallel attention: plan once per layer shape, call per layer with each rank's shards.

See :class:`Attention`. Methods: auto (the sim executor times every method that applies and
keeps the fastest), ring, ulysses, usp, tas, torus (StreamFusion) and mesh.
"""

from . import _C
from ._frameworks import default_stream, like_input, new_output


class Attention(_C.sp.Attention):
    __doc__ = _C.sp.Attention.__doc__

    def __call__(self, q, k, v, *, out=None, joint_q=None, joint_k=None, joint_v=None,
                 joint_out=None, stream=None):
        if out is None:
            out = new_output(q)
        if joint_out is None and joint_q is not None:
            joint_out = new_output(joint_q)
        if stream is None:
            stream = default_stream(q)
        return like_input(q, super().__call__(q, k, v, out=out, joint_q=joint_q, joint_k=joint_k,
                                              joint_v=joint_v, joint_out=joint_out,
                                              stream=stream))

    __call__.__doc__ = _C.sp.Attention.__call__.__doc__


__all__ = ["Attention"]
