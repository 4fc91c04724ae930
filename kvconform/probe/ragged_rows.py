"""The ragged path's row lengths, plain arithmetic the planner shares with the probe (no torch)."""

from __future__ import annotations


def ragged_row_lengths(batch_size: int, prompt_length: int) -> list[int]:
    """Unpadded prompt lengths of the ragged path's rows: P, P-1, … (at least 2 tokens each)."""
    return [max(2, prompt_length - row) for row in range(batch_size)]
