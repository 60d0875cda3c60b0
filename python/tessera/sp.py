"""Sequence-parallel attention: plan once per layer shape, call per layer with each rank's shards.

See :class:`Attention`. Methods: auto (the sim executor times every method that applies and
keeps the fastest), ring, ulysses, usp, tas, torus (StreamFusion) and mesh.
"""

from . import _C
from ._frameworks import like_input


class Attention(_C.sp.Attention):
    __doc__ = _C.sp.Attention.__doc__

    def __call__(self, q, k, v, *args, **kwargs):
        return like_input(q, super().__call__(q, k, v, *args, **kwargs))

    __call__.__doc__ = _C.sp.Attention.__call__.__doc__


__all__ = ["Attention"]
