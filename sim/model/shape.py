"""`ModelShape`: a model as the FLOPs and bytes a cost model prices (`sim.model.from_config`
reads one from a config.json through the shared reader `shared.config.hf_config`): dense
Llama-family models (Llama 2/3, Qwen2/2.5/3, SmolLM2, Mistral), mixture-of-experts models
(Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3, gpt-oss: `moe`) and multi-head latent attention
(DeepSeek: `mla`).

Weight and KV dtypes are knobs (`sim.hardware.precision`). A bf16/fp16/fp32 weight dtype applies to
every weight; a quantized one (fp8, nvfp4, int4, mxfp4) to the linear layers of every group but
those in `unquantized` (`sim.model.weight_formats`: by default the router, the embeddings and the
LM head), which stay in bf16, as do the norms and biases: each group's bytes are its own
dtype's (`module_dtype`). FLOPs count a multiply-add as 2. Attention over `prefix`
cached tokens and `extend` new tokens (causal) scores e*p + e*(e+1)/2 query-key pairs per head.

Per layer: the attention projections, then a dense gated MLP (3 * hidden * intermediate) or,
in a sparse layer, a router (hidden * experts), the shared experts and `experts_per_token` of
the routed experts (3 * hidden * expert_intermediate each). The routed experts are priced per
step by the roofline (the distinct experts a batch touches); everything else is read once per
step and computed for every token (`shared_linear_params`).

MLA follows SGLang: prefill runs naive attention (the latent up-projected by kv_b to per-head
keys of qk_nope + qk_rope dims and values of v_head_dim, for every KV token of the batch),
decode runs absorbed attention (kv_b folded into the query and output: per token 2 * kv_b
FLOPs, per query-key pair and head scores over kv_lora_rank + qk_rope dims and values over
kv_lora_rank). The KV cache holds the latent (`shared.config.kv_cache_layout`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.config.kv_cache_layout import KVCacheLayout
from shared.config.mla_config import MLAConfig
from shared.config.moe_config import MoEConfig
from sim.hardware.precision import (
    DTYPE_BYTES,
    QUANTIZED_DTYPES,
    WEIGHT_DTYPE_BYTES,
    canonical_dtype,
)
from sim.model.weight_formats import UNQUANTIZED_BY_DEFAULT, check_groups


def causal_pairs(prefix_lens: Any, extend_lens: Any) -> int:
    """Query-key pairs scored by causal attention, summed over requests: each of a request's
    e new tokens sees the p cached ones and the new ones up to itself, e*p + e*(e+1)/2."""
    p = np.asarray(prefix_lens, dtype=np.int64)
    e = np.asarray(extend_lens, dtype=np.int64)
    return int(np.sum(e * p + e * (e + 1) // 2))


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int                  # MLA: qk_nope + qk_rope (the naive query/key width)
    intermediate_size: int         # the dense layers' MLP
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    qkv_bias: bool = False
    qk_norm: bool = False
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    moe: MoEConfig | None = None   # None: every layer dense
    mla: MLAConfig | None = None   # None: per-head K and V
    unquantized: tuple[str, ...] = UNQUANTIZED_BY_DEFAULT   # weight groups kept in bf16
    sliding_window: int | None = None   # the sliding layers' window (sim.model.sliding_window)
    sliding_layers: int = 0             # layers that attend over the window only

    def __post_init__(self) -> None:
        for f in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                  "intermediate_size", "vocab_size", "max_position_embeddings"):
            value = getattr(self, f)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.name}: {f} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{self.name}: num_heads ({self.num_heads}) is not a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")
        if self.moe is not None and len(self.moe.sparse_layers) != self.num_layers:
            raise ValueError(f"{self.name}: moe.sparse_layers has {len(self.moe.sparse_layers)} "
                             f"entries for {self.num_layers} layers")
        object.__setattr__(self, "weight_dtype", canonical_dtype(self.weight_dtype, weights=True))
        object.__setattr__(self, "kv_dtype", canonical_dtype(self.kv_dtype))
        object.__setattr__(self, "unquantized", check_groups(self.unquantized, self.name))
        if not (0 <= self.sliding_layers <= self.num_layers
                and (self.sliding_layers == 0 or (self.sliding_window or 0) >= 1)):
            raise ValueError(f"{self.name}: sliding_layers ({self.sliding_layers!r}) must be in "
                             f"[0, {self.num_layers}], with a sliding_window >= 1 when > 0")

    def with_dtypes(self, weight_dtype: str | None = None, kv_dtype: str | None = None
                    ) -> ModelShape:
        return dataclasses.replace(self, weight_dtype=weight_dtype or self.weight_dtype,
                                   kv_dtype=kv_dtype or self.kv_dtype)

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def weight_bytes_per_param(self) -> float:
        """The quantized linear layers' bytes per weight: 2 for bf16, 1 for fp8, 0.5625 for
        nvfp4 (with its block scales), 0.53125 for mxfp4, 0.5 for int4."""
        return WEIGHT_DTYPE_BYTES[self.weight_dtype]

    def module_dtype(self, group: str) -> str:
        """The dtype a weight group (`sim.model.weight_formats.MODULE_GROUPS`) is stored in:
        the weight dtype, or bf16 for an unquantized group of a quantized model."""
        if self.weight_dtype in QUANTIZED_DTYPES and group in self.unquantized:
            return "bf16"
        return self.weight_dtype

    def module_bytes_per_param(self, group: str) -> float:
        return WEIGHT_DTYPE_BYTES[self.module_dtype(group)]

    @property
    def plain_bytes_per_param(self) -> float:
        """Norms and biases: never quantized (bf16 under a quantized weight dtype)."""
        return 2 if self.weight_dtype in QUANTIZED_DTYPES else DTYPE_BYTES[self.weight_dtype]

    # --- parameters ---------------------------------------------------------------------

    @property
    def attention_params_per_layer(self) -> int:
        """Attention projections: q, k, v, o; MLA: q_a and q_b (or one q), kv_a (latent and
        rotary key), kv_b (latent to per-head nope keys and values), o."""
        h, a = self.hidden_size, self.mla
        if a is None:
            return h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        q_out = self.num_heads * a.qk_head_dim
        q = h * q_out if a.q_lora_rank is None else a.q_lora_rank * (h + q_out)
        return q + h * a.cache_dim + self.kv_up_params_per_layer + self.num_heads * a.v_head_dim * h

    @property
    def kv_up_params_per_layer(self) -> int:
        """MLA's kv_b projection (kv_lora_rank -> heads * (qk_nope + v)); 0 without MLA."""
        a = self.mla
        return 0 if a is None else a.kv_lora_rank * self.num_heads * (a.qk_nope_head_dim + a.v_head_dim)

    @property
    def linear_params_per_layer(self) -> int:
        """A dense layer's projections and gated MLP (gate, up, down)."""
        return self.attention_params_per_layer + 3 * self.hidden_size * self.intermediate_size

    @property
    def num_sparse_layers(self) -> int:
        return 0 if self.moe is None else self.moe.num_sparse_layers

    @property
    def params_per_expert(self) -> int:
        """One routed expert's gated MLP; 0 for a dense model."""
        return 0 if self.moe is None else 3 * self.hidden_size * self.moe.expert_intermediate_size

    @property
    def sparse_layer_shared_params(self) -> int:
        """A sparse layer's router and shared experts (computed for every token)."""
        m = self.moe
        return 0 if m is None else self.hidden_size * (m.num_experts + 3 * m.shared_intermediate_size)

    @property
    def shared_linear_params(self) -> int:
        """Linear weights read once per step and computed for every token, all layers: the
        attention projections, the dense layers' MLPs, the sparse layers' router and shared
        experts (the routed experts excluded)."""
        sparse = self.num_sparse_layers
        if sparse == 0:
            return self.num_layers * self.linear_params_per_layer
        return (self.num_layers * self.attention_params_per_layer
                + (self.num_layers - sparse) * 3 * self.hidden_size * self.intermediate_size
                + sparse * self.sparse_layer_shared_params)

    @property
    def router_params(self) -> int:
        """Every sparse layer's router."""
        return 0 if self.moe is None else self.num_sparse_layers * self.hidden_size * self.moe.num_experts

    @property
    def mlp_params(self) -> int:
        """The dense layers' MLPs and the sparse layers' shared experts."""
        shared = 0 if self.moe is None else self.moe.shared_intermediate_size
        return 3 * self.hidden_size * ((self.num_layers - self.num_sparse_layers)
                                       * self.intermediate_size + self.num_sparse_layers * shared)

    @property
    def routed_expert_params(self) -> int:
        """Every routed expert of every sparse layer."""
        return 0 if self.moe is None else self.num_sparse_layers * self.moe.num_experts * self.params_per_expert

    @property
    def extra_params_per_layer(self) -> int:
        """q/k/v biases, the two RMSNorms, Qwen3's q/k norms, MLA's latent norms."""
        bias = self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0
        qk_norm = 2 * self.head_dim if self.qk_norm else 0
        mla = 0 if self.mla is None else (self.mla.q_lora_rank or 0) + self.mla.kv_lora_rank
        return bias + 2 * self.hidden_size + qk_norm + mla

    @property
    def params_per_layer(self) -> int:
        """A dense layer's linear weights plus its biases and norms."""
        return self.linear_params_per_layer + self.extra_params_per_layer

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def param_count(self) -> int:
        """All parameters; a tied LM head shares the embedding matrix."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_params
        return (self.shared_linear_params + self.routed_expert_params
                + self.num_layers * self.extra_params_per_layer + self.embedding_params
                + lm_head + self.hidden_size)

    @property
    def active_param_count(self) -> int:
        """Parameters one token computes with: experts_per_token routed experts per layer."""
        if self.moe is None:
            return self.param_count
        active = self.num_sparse_layers * self.moe.experts_per_token * self.params_per_expert
        return self.param_count - self.routed_expert_params + active

    # --- bytes ----------------------------------------------------------------------------

    @property
    def weight_bytes_per_layer(self) -> float:
        """A dense layer's weights: its projections and MLP at their groups' bytes, its norms
        and biases in 16 bits."""
        return (self.attention_params_per_layer * self.module_bytes_per_param("attention")
                + 3 * self.hidden_size * self.intermediate_size * self.module_bytes_per_param("mlp")
                + self.extra_params_per_layer * self.plain_bytes_per_param)

    @property
    def weight_bytes(self) -> float:
        """Every weight at its group's bytes (a tied LM head counted once, as the embeddings)."""
        lm_head = 0.0 if self.tie_word_embeddings else self.lm_head_weight_bytes
        plain = self.num_layers * self.extra_params_per_layer + self.hidden_size
        return (self.linear_weight_bytes + self.expert_weight_bytes + lm_head
                + self.embedding_params * self.module_bytes_per_param("embedding")
                + plain * self.plain_bytes_per_param)

    @property
    def attention_weight_bytes(self) -> float:
        """The attention projections' bytes (all layers)."""
        return (self.num_layers * self.attention_params_per_layer
                * self.module_bytes_per_param("attention"))

    @property
    def linear_weight_bytes(self) -> float:
        """Bytes a forward reads for the shared linear weights (all layers): the attention
        projections, the routers, the dense MLPs and shared experts, each at its group's."""
        return (self.attention_weight_bytes
                + self.router_params * self.module_bytes_per_param("router")
                + self.mlp_params * self.module_bytes_per_param("mlp"))

    @property
    def expert_weight_bytes(self) -> float:
        """Bytes of all routed experts (all sparse layers); 0 for a dense model."""
        return self.routed_expert_params * self.module_bytes_per_param("experts")

    @property
    def lm_head_weight_bytes(self) -> float:
        """Bytes the LM head reads (the embedding matrix when tied)."""
        return self.embedding_params * self.module_bytes_per_param("lm_head")

    def kv_layout(self, tp: int = 1) -> KVCacheLayout:
        """The KV cache layout on one of `tp` ranks (shared with exec: `shared.config.kv_cache_layout`).
        NOTE: the shape has the fields KVCacheLayout.of reads from an HFConfig (num_layers,
        num_kv_heads, head_dim, mla)."""
        return KVCacheLayout.of(self, DTYPE_BYTES[self.kv_dtype], tp)  # type: ignore[arg-type]

    @property
    def kv_bytes_per_token(self) -> int:
        """One token's KV in every layer: 2 * layers * kv_heads * head_dim * bytes, or MLA's
        layers * (kv_lora_rank + qk_rope) * bytes."""
        return self.kv_layout(1).bytes_per_token

    # --- FLOPs ----------------------------------------------------------------------------

    @property
    def linear_flops_per_token(self) -> int:
        """Shared linear FLOPs per token row (all layers; LM head and routed experts excluded);
        with MLA, absorbed (decode): kv_b's two folded products count per token."""
        return 2 * self.shared_linear_params

    @property
    def naive_linear_flops_per_token(self) -> int:
        """As linear_flops_per_token for naive (prefill) MLA: kv_b runs per KV token instead."""
        return self.linear_flops_per_token - self.kv_up_flops_per_kv_token

    @property
    def kv_up_flops_per_kv_token(self) -> int:
        """Naive MLA: kv_b FLOPs per KV token a prefill reads (all layers); 0 without MLA."""
        return 2 * self.num_layers * self.kv_up_params_per_layer

    @property
    def lm_head_flops_per_row(self) -> int:
        return 2 * self.hidden_size * self.vocab_size

    @property
    def attention_flops_per_pair(self) -> int:
        """QK^T and PV FLOPs per query-key pair, all heads and layers, in decode (MLA:
        absorbed, over the latent)."""
        if self.mla is None:
            return 4 * self.num_layers * self.q_dim
        a = self.mla
        return 2 * self.num_layers * self.num_heads * (2 * a.kv_lora_rank + a.qk_rope_head_dim)

    @property
    def naive_attention_flops_per_pair(self) -> int:
        """As attention_flops_per_pair in prefill (MLA: naive, qk_head_dim and v_head_dim)."""
        if self.mla is None:
            return self.attention_flops_per_pair
        a = self.mla
        return 2 * self.num_layers * self.num_heads * (a.qk_head_dim + a.v_head_dim)

    def attention_flops(self, prefix_lens: Any, extend_lens: Any) -> int:
        """Prefill attention FLOPs of requests with these prefix and extend lengths."""
        return self.naive_attention_flops_per_pair * causal_pairs(prefix_lens, extend_lens)
