"""Sequence-parallel attention: plan once per layer shape, call per layer with each rank's shards.

See :class:`Attention`. Methods: auto (the sim executor times every method that applies and
keeps the fastest), ring, ulysses, usp, tas, torus (StreamFusion) and mesh.
"""

from ._C.sp import Attention

__all__ = ["Attention"]
