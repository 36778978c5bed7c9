"""The token stream: deterministic synthetic text whose order never depends on how a batch is split.

Sequence ``k`` of the stream is generated from ``(seed, k)`` alone, so the global batch of step
``s`` is always sequences ``s * global_batch .. (s + 1) * global_batch - 1`` whatever the
micro-batch, gradient accumulation or world size. The text is a Markov chain whose next token is
one of a few likely successors, so there is something to learn and the loss visibly falls.
"""

import hashlib

import numpy as np
import torch


class TokenStream:
    """Sequences of ``seq_len + 1`` tokens from a fixed random Markov chain over ``vocab_size``."""

    def __init__(self, seed: int, vocab_size: int, seq_len: int, successors: int = 4):
        rng = np.random.default_rng(seed)
        self.successors = np.stack([rng.choice(vocab_size, size=successors, replace=False)
                                    for _ in range(vocab_size)])
        self.cdf = np.cumsum(rng.dirichlet(np.ones(successors), size=vocab_size), axis=1)
        self.seed, self.vocab_size, self.seq_len = seed, vocab_size, seq_len

    def sequences(self, indices: list[int]) -> np.ndarray:
        """Tokens of the given global sequence indices, shape (len(indices), seq_len + 1)."""
        draws = np.stack([np.random.default_rng([self.seed, k]).random(self.seq_len + 1)
                          for k in indices])
        tokens = np.empty(draws.shape, dtype=np.int64)
        tokens[:, 0] = (draws[:, 0] * self.vocab_size).astype(np.int64)
        last = self.successors.shape[1] - 1
        for t in range(1, self.seq_len + 1):
            prev = tokens[:, t - 1]
            choice = np.minimum((self.cdf[prev] < draws[:, t:t + 1]).sum(axis=1), last)
            tokens[:, t] = self.successors[prev, choice]
        return tokens

    def batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets for the given global sequence indices."""
        tokens = torch.from_numpy(self.sequences(indices))
        return tokens[:, :-1], tokens[:, 1:]

    def micro_batch_indices(self, step: int, global_batch: int, rank: int, world: int,
                            micro_step: int, micro_batch: int) -> list[int]:
        """Global indices of one micro-batch: the rank's contiguous shard of the step's batch."""
        per_rank = global_batch // world
        start = step * global_batch + rank * per_rank + micro_step * micro_batch
        return list(range(start, start + micro_batch))

    def fingerprint(self, global_batch: int, steps: int) -> str:
        """A short hash of the first and last step's tokens: equal streams give equal prints."""
        first = self.sequences(list(range(global_batch)))
        last = self.sequences(list(range((steps - 1) * global_batch, steps * global_batch)))
        return hashlib.sha256(first.tobytes() + last.tobytes()).hexdigest()[:16]
