"""Sliding-window attention layers: the keys they skip.

A model's `sliding_layers` of its layers attend over the last `sliding_window` positions only
(gpt-oss: every other layer, window 128; Mistral 7B v0.1: every layer, 4096), the others over
the whole sequence. A query at position q (0-based) scores q + 1 keys in a full layer and
min(q + 1, W) in a sliding one, and a step reads, per request, the keys its queries can
reach. The cost models price a step's attention per layer: the full layers' work, less the
sliding layers' savings (`window_savings`) on their share of the layers.
NOTE: SGLang's separate KV pool for the sliding layers (`--swa-full-tokens-ratio`) sizes the
KV capacity (`EngineProfile.swa_full_tokens_ratio`, `sim.model.kv_capacity`); which tokens it
frees past the window is not modelled (the scheduler counts full-layer tokens), nor is vLLM's
hybrid allocator (its profiles count every layer's whole history).
"""

from __future__ import annotations

from collections.abc import Sequence


def window_savings(prefix_lens: Sequence[int], extend_lens: Sequence[int],
                   window: int) -> tuple[int, int]:
    """(KV entries, query-key pairs) one sliding-window layer skips against a full layer,
    summed over requests: a request of p cached and e new tokens skips the keys its first
    query cannot reach, max(0, p + 1 - W), from the read, and sum over its queries of
    max(0, q + 1 - W) from the scored pairs."""
    reads = pairs = 0
    for p, e in zip(prefix_lens, extend_lens, strict=True):
        if p + e <= window:
            continue
        reads += max(0, p + 1 - window)
        first, last = max(p + 1, window + 1), p + e   # the keys counts m = q + 1 above W
        pairs += (last - first + 1) * (first + last - 2 * window) // 2
    return reads, pairs
