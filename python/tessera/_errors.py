"""Tessera's exceptions: one class per tessera::ErrorCode, raised with the C++ message.

Every message names the argument (or peer), its value and what was expected, e.g.
``tessera: invalid argument: q: 3 dimensions [2, 5, 8]: expected 4 [B, Lq, Hq, D]``.
"""

from __future__ import annotations

import builtins


class Error(RuntimeError):
    """Any failure Tessera reports. ``code`` says what kind (a tessera::ErrorCode)."""

    code = "internal"


class InvalidArgumentError(Error, ValueError):
    """A caller passed something outside the documented contract (shape, dtype, device...)."""

    code = "invalid_argument"


class UnsupportedError(Error, NotImplementedError):
    """Valid, but not implemented for this backend, dtype or shape."""

    code = "unsupported"


class TimeoutError(Error, builtins.TimeoutError):
    """A bounded wait on another rank expired (TESSERA_TIMEOUT_MS)."""

    code = "timeout"


class PeerFailureError(Error):
    """Another rank reported an error or went away."""

    code = "peer_failure"


class CudaError(Error):
    code = "cuda"


class NcclError(Error):
    code = "nccl"


class NvshmemError(Error):
    code = "nvshmem"


class SystemError(Error, OSError):
    """An OS call (socket, fork, file) failed."""

    code = "system"


class InternalError(Error):
    """A Tessera invariant broke: a bug."""

    code = "internal"


class RankError(Error):
    """A function run by :func:`tessera.run_cpu_ranks` raised on one or more ranks.

    The message names the rank whose exception is the root cause (ranks that only report
    another rank's failure are passed over) and lists the others. ``rank`` is that rank,
    ``errors`` maps every failed rank to its exception, and ``__cause__`` is the root cause
    (so its traceback prints too).
    """

    code = "peer_failure"

    def __init__(self, message: str, rank: int, errors: dict[int, BaseException]):
        super().__init__(message)
        self.rank = rank
        self.errors = errors


# Shown as tessera.InvalidArgumentError etc. in tracebacks, where users catch them.
for _cls in (Error, RankError):
    _cls.__module__ = "tessera"

ERROR_CLASSES = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        UnsupportedError,
        TimeoutError,
        PeerFailureError,
        CudaError,
        NcclError,
        NvshmemError,
        SystemError,
        InternalError,
    )
}

for _cls in ERROR_CLASSES.values():
    _cls.__module__ = "tessera"
