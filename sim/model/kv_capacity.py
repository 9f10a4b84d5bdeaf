"""`kv_capacity_tokens`: how many KV tokens the engine's pool holds beside the weights."""

from __future__ import annotations

from sim.hardware.hardware import Hardware
from sim.model.parallelism import (
    check_attention_dp,
    check_ep,
    kv_bytes_per_token_per_rank,
    weight_bytes_per_gpu,
)
from sim.model.shape import ModelShape

DEFAULT_RESERVE_FRACTION = 0.1


def kv_capacity_tokens(model_shape: ModelShape, hardware: Hardware, tp: int = 1,
                       max_total_tokens: int | None = None,
                       reserve_fraction: float = DEFAULT_RESERVE_FRACTION, ep_size: int = 1,
                       attention_dp: int = 1, extra_weight_bytes: float = 0.0,
                       swa_full_tokens_ratio: float | None = None,
                       kv_free_fraction: float | None = None,
                       memory_fraction: float | None = None) -> int:
    """KV tokens the engine can hold. A real run's `max_total_tokens`, when given, always
    wins. Else per rank: (capacity * (1 - reserve_fraction) - weights per GPU) / KV bytes per
    token per rank, i.e. (capacity * tp - weights - reserve) / KV bytes per token when tp
    divides the KV heads (weights per GPU: `sim.model.parallelism.weight_bytes_per_gpu`).
    `reserve_fraction` of memory is kept for activations, CUDA graphs and the allocator (an
    assumption; import the real value when you have a run). Under attention data
    parallelism each of the `attention_dp` ranks holds its own requests' KV at the attention
    tp (tp / attention_dp), so the engine holds attention_dp times one rank's tokens.
    `extra_weight_bytes`: weights a GPU holds beyond its shard (`EPOptions`).
    `swa_full_tokens_ratio` (the engine's, `EngineProfile`): a sliding-window layer holds
    that many tokens per full-layer token, so it costs that fraction of its KV bytes per
    token counted; None: every layer holds every token. `kv_free_fraction` (TensorRT-LLM's):
    the pool is that share of the memory the weights leave, instead of what
    `reserve_fraction` of the whole GPU and the weights leave.
    `memory_fraction` (vLLM's --gpu-memory-utilization, SGLang's --mem-fraction-static): the
    weights and the pool take that share of the GPU, i.e. reserve_fraction = 1 - it.
    NOTE: under kv_free_fraction the engine's activations are not subtracted first (TensorRT
    measures free memory after allocating them: a few GB, so this over-counts a little)."""
    if max_total_tokens is not None:
        if isinstance(max_total_tokens, bool) or not isinstance(max_total_tokens, int) \
                or max_total_tokens < 1:
            raise ValueError(f"max_total_tokens must be a positive integer, got {max_total_tokens!r}")
        return max_total_tokens
    check_attention_dp(attention_dp, tp, model_shape)   # and tp / attention_dp for the heads
    check_ep(ep_size, tp, model_shape)
    if not 0 <= reserve_fraction < 1:
        raise ValueError(f"reserve_fraction must be in [0, 1), got {reserve_fraction!r}")
    weights = weight_bytes_per_gpu(model_shape, tp, ep_size, attention_dp) + extra_weight_bytes
    usable = hardware.mem_capacity * (1 - reserve_fraction if memory_fraction is None
                                      else memory_fraction)
    free = (usable - weights if kv_free_fraction is None
            else kv_free_fraction * (hardware.mem_capacity - weights))
    per_rank = kv_bytes_per_token_per_rank(model_shape, tp // attention_dp)
    if swa_full_tokens_ratio is not None and model_shape.sliding_layers:
        full = model_shape.num_layers - model_shape.sliding_layers
        per_rank = per_rank * (full + swa_full_tokens_ratio * model_shape.sliding_layers) \
            / model_shape.num_layers
    tokens = int(free // per_rank) * attention_dp
    if tokens < 1:
        raise ValueError(
            f"{model_shape.name} ({model_shape.weight_dtype}) does not fit on {tp}x {hardware.key}: "
            f"{weights / 1e9:.1f} GB of weights per rank vs "
            f"{usable / 1e9:.1f} GB usable")
    return tokens
