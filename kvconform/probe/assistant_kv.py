"""The assistant's own cache after its last draft call, against one fresh pass of the assistant over what it holds.

Assisted ``generate()`` keeps the assistant's cache across its draft calls and crops the rejected drafts from it
(``AssistedCandidateGenerator._update_past_and_masks``). A cache rolled back to the right length can still hold the
wrong K/V (a stale draft's, positions written again at others'): the main model verifies every draft, so the tokens
stay greedy's while the drafts, and the speed-up, quietly degrade. After the run, the cache the assistant's last call
returned is compared with one fresh pass of the assistant over the sequence that call returned, at the positions each
layer holds (a sliding layer recording its past for the crops holds more than its window), by ``kv_parity``'s rule:
each element within ``atol + rtol × scale`` of its head dimension. How many positions it holds is the length checks'
(``AssistantCall.fault``).
"""

from __future__ import annotations

from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.compat import cache_keyword
from kvconform.probe.cache_io import seq_length
from kvconform.probe.fresh_kv import fresh_kv_pairs
from kvconform.probe.kv_compare import KVParity, kv_parity


def inferred_padding(config: Any, sequences: torch.Tensor) -> str | None:
    """Why the assistant's K/V are not compared: its sequence holds the pad id of the run's generation ``config`` (which
    the candidate generator hands the assistant's calls), and each of those calls, given no mask, reads it as padding
    (generation/utils.py:953-958 in 5.24: ``input_ids.ne(pad_token_id)`` where the pad id is in the inputs and is not
    the EOS), so the K/V after that token were computed with it masked. A random model that generates the pad id is
    degenerate, not a cache fault."""
    pad, eos = config.pad_token_id, config.eos_token_id
    eos_ids = set(eos) if isinstance(eos, list) else {eos}
    if pad is None or pad in eos_ids or not bool((sequences == pad).any()):
        return None
    at = int((sequences[0] == pad).nonzero()[0])
    return (f"not compared: the sequence holds the pad id {pad} (position {at}), which the assistant's generate() masks as "
            "padding (its attention mask inferred from the ids)")


def assistant_kv(assistant: Model, sequences: torch.Tensor, cache: Any, positioned: bool) -> KVParity:
    """The assistant's returned ``cache`` against a fresh pass over ``sequences`` (its last call's) up to the length the
    cache holds; ``positioned``: generate() fed ``position_ids`` (0, 1, …), so the fresh pass is given them too."""
    held = seq_length(cache)
    if held is None or held > sequences.shape[-1]:
        return KVParity(0, 0.0, None, problem=f"the assistant's cache holds {held} positions of a {sequences.shape[-1]}-token sequence")
    full = sequences[:, :held]
    positions = {"position_ids": torch.arange(held, device=full.device)[None]} if positioned else {}
    with torch.inference_mode():
        pairs = fresh_kv_pairs(assistant, cache_keyword(assistant), "dynamic", cache, full, held=True, **positions)
    return kv_parity(pairs, held)
