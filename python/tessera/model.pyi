# Type stubs for tessera.model (python/src/model.cc).
from typing import Any, Optional, Sequence

import numpy as np
import numpy.typing as npt

class Llama:
    """A Llama-family decoder (Llama 2/3, Qwen2.5) on one rank: float32 reference layers on
    the cpu backend, bf16 with CUDA graphs on one GPU."""

    def __init__(
        self,
        config: str,
        weights: Optional[str] = None,
        seed: int = 1,
        backend: str = "cpu",
        device: int = 0,
        page_size: int = 16,
        num_pages: int = 256,
        max_context: int = 4096,
        max_batch: int = 64,
        max_tokens: int = 4096,
        max_logit_rows: int = 64,
    ) -> None:
        """config: a preset (tiny, llama3-8b, llama3-70b) or a config.json (file or
        directory). weights: a .safetensors file or a directory of them (Hugging Face names);
        None: random from seed. backend: cpu or cuda. The KV cache holds num_pages pages of
        page_size tokens. cuda only: max_context, max_batch, max_tokens (rows of one forward)
        and max_logit_rows (rows of logits one forward returns) size the plans."""
    @property
    def vocab_size(self) -> int: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def backend(self) -> str: ...
    def add_sequence(self) -> int:
        """A new, empty sequence; returns its id."""
    def release_sequence(self, seq_id: int) -> None:
        """Frees the sequence's pages."""
    def length(self, seq_id: int) -> int:
        """Tokens cached for the sequence."""
    def forward(
        self,
        inputs: Sequence[tuple[int, Sequence[int]]],
        rows: str = "all",
        strategy: Any = None,
    ) -> npt.NDArray[np.float32]:
        """inputs: (seq_id, new token ids) pairs, prefills and decodes mixed. Appends the
        tokens to their sequences and returns float32 logits [R, vocab_size]: every new
        token's row in input order (rows='all') or each input's last row (rows='last').
        strategy: a built-in strategy's name or, on cpu, an object with split(lengths) and
        schedule(ctx) (tessera.sched). cpu: every order gives bitwise the same logits; cuda:
        nano-batches on compute, memory and network streams, within bf16 rounding."""
    def generate(self, prompt: Sequence[int], steps: int) -> list[int]:
        """Greedy generation: prefills prompt in a new sequence, then steps argmax tokens;
        returns them (the sequence is released)."""
