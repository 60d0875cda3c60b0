"""The decode step's attention block (ClusterFusion): RMSNorm, QKV projection, RoPE, cache
append, attention over the KV cache and the output projection as one operation; on a GPU the
fused kernel runs one thread-block cluster per KV head.

See :class:`AttentionBlock`.
"""

from . import _C
from ._frameworks import default_stream, exported, like_input, new_bytes, new_output


class AttentionBlock(_C.decode.AttentionBlock):
    __doc__ = _C.decode.AttentionBlock.__doc__

    def __call__(self, x, positions, weights, k_cache, v_cache=None, *, page_table=None,
                 out=None, workspace=None, stream=None):
        if out is None:
            out = new_output(x)
        if workspace is None:  # kept for the next steps (and graph replays): scratch only
            workspace = getattr(self, "_workspace", None)
            if workspace is None:
                workspace = self._workspace = new_bytes(x, self.workspace_bytes)
        if stream is None:
            stream = default_stream(x)
        result = super().__call__(
            exported(x), exported(positions), {k: exported(w) for k, w in weights.items()},
            exported(k_cache), exported(v_cache), page_table=exported(page_table),
            out=exported(out), workspace=exported(workspace), stream=stream)
        # An output given (or made by the framework) comes back as itself, not as its capsule.
        return like_input(x, result if out is None else out)

    __call__.__doc__ = _C.decode.AttentionBlock.__call__.__doc__


__all__ = ["AttentionBlock"]
