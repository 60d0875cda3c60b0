"""Outputs in the caller's framework.

Tessera allocates the outputs it returns itself (when no `out` is given) as NumPy arrays, so the
extension links no framework. A caller who passed PyTorch tensors gets PyTorch tensors back, the
same memory through DLPack (bfloat16 bit patterns viewed as bfloat16). The framework is the one
the inputs came from, already imported by the caller: nothing is imported here.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def like_input(sample: Any, result: Any) -> Any:
    """`result` (an array or a tuple of them) in `sample`'s framework where Tessera made it."""
    if type(sample).__module__.split(".")[0] != "torch":
        return result
    torch = sys.modules["torch"]

    def convert(a: Any) -> Any:
        if not isinstance(a, np.ndarray):
            return a  # the caller's own `out`, or not an array
        t = torch.from_dlpack(a)
        if sample.dtype == torch.bfloat16 and a.dtype == np.uint16:
            t = t.view(torch.bfloat16)
        return t

    return tuple(convert(a) for a in result) if isinstance(result, tuple) else convert(result)
