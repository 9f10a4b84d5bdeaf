"""Tensor and expert parallelism of a simulated model: which degrees are valid, and what one
GPU holds.

tp GPUs run attention and the shared linears tensor-parallel; the routed experts run
expert-parallel over ep ranks (SGLang's `--ep-size`), each expert split over tp / ep GPUs
(moe_tp), so ep must divide tp and the experts, and moe_tp the expert width. A GPU holds
1 / tp of the shared weights and E / ep experts at 1 / moe_tp each: 1 / tp of them as well.

Attention data parallelism (SGLang's `--enable-dp-attention --dp-size d`): the tp GPUs form
d attention ranks, each running attention tensor-parallel over tp / d GPUs (the attention
tp) on its own requests; so a GPU holds 1 / (tp / d) of the attention weights and its
rank's KV cache, while the MLP and the experts stay sharded over all tp GPUs.
"""

from __future__ import annotations

from sim.model.shape import ModelShape


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_tp(tp: int, model: ModelShape) -> None:
    """tp must be a positive int dividing the attention heads, and divide or be a multiple of
    the KV heads (KV heads are replicated when tp > kv_heads)."""
    _positive_int("tp", tp)
    if model.num_heads % tp:
        raise ValueError(f"tp={tp} does not divide {model.name}'s {model.num_heads} attention heads")
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise ValueError(f"tp={tp} neither divides nor is a multiple of {model.name}'s "
                         f"{model.num_kv_heads} KV heads")


def check_ep(ep_size: int, tp: int, model: ModelShape) -> None:
    """ep_size must be a positive int; above 1 only for a mixture-of-experts model, dividing
    its routed experts and tp; and tp / ep_size must divide the expert intermediate size."""
    _positive_int("ep_size", ep_size)
    moe = model.moe
    if moe is None:
        if ep_size > 1:
            raise ValueError(f"ep_size={ep_size}: {model.name} is a dense model (no experts to "
                             f"place); use ep_size 1")
        return
    if moe.num_experts % ep_size:
        raise ValueError(f"ep_size={ep_size} does not divide {model.name}'s {moe.num_experts} "
                         f"routed experts")
    if tp % ep_size:
        raise ValueError(f"ep_size={ep_size} does not divide tp={tp} (the experts are placed "
                         f"on the tp GPUs)")
    moe_tp = tp // ep_size
    if moe.expert_intermediate_size % moe_tp:
        raise ValueError(f"tp={tp} with ep_size={ep_size} splits each expert {moe_tp} ways, "
                         f"which does not divide {model.name}'s expert intermediate size "
                         f"{moe.expert_intermediate_size}")


def check_attention_dp(attention_dp: int, tp: int, model: ModelShape) -> None:
    """attention_dp must be a positive int dividing tp, and tp / attention_dp a valid tp for
    the attention heads (`check_tp`)."""
    _positive_int("dp_size", attention_dp)
    if tp % attention_dp:
        raise ValueError(f"dp_size={attention_dp} does not divide tp={tp} (attention data "
                         f"parallelism splits the tp GPUs into dp_size attention ranks)")
    check_tp(tp // attention_dp, model)


def weight_bytes_per_gpu(model: ModelShape, tp: int, ep_size: int = 1,
                         attention_dp: int = 1) -> float:
    """Weight bytes one GPU holds: the attention weights / (tp / attention_dp), the other
    shared weights / tp, the routed experts / (ep * moe_tp)."""
    experts = model.expert_weight_bytes
    if attention_dp == 1:
        return (model.weight_bytes - experts) / tp + experts / ep_size / (tp // ep_size)
    attention = model.attention_weight_bytes
    shared = model.weight_bytes - experts - attention
    return (shared / tp + attention / (tp // attention_dp)
            + experts / ep_size / (tp // ep_size))


def kv_bytes_per_token_per_rank(model: ModelShape, tp: int) -> int:
    """KV bytes one token takes on one rank (`shared.config.kv_cache_layout`: whole KV heads,
    replicated when tp > kv_heads; MLA's latent on every rank)."""
    return model.kv_layout(tp).bytes_per_token
