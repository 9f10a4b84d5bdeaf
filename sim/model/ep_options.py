"""`EPOptions`: SGLang's large-scale expert-parallel serving flags, which change how a MoE
model's layers are laid out on the GPUs of an attention-DP engine:

- `a2a_backend` (`--moe-a2a-backend`, formerly `--enable-deepep-moe`): "none" gathers every
  row to every GPU before a sparse layer and scatters after; "deepep" dispatches each
  token's hidden state only to the GPUs of its experts (fp8 out, bf16 back), over NVLink
  and RDMA (normal kernels, extends) or RDMA only (low-latency kernels, decode).
- `dense_tp_size` (`--moe-dense-tp-size`): None shards the dense MLPs and shared experts over
  tp; 1 runs them data-parallel, each GPU on its own rows with the whole weights.
- `dp_lm_head` (`--enable-dp-lm-head`): each attention rank computes its own rows' logits
  over the whole vocabulary, instead of a vocabulary-parallel head with a gather.
- `two_batch_overlap` (`--enable-two-batch-overlap`): two micro-batches of half the rows
  (each reading the weights), one's all-to-all beside the other's compute in four stages per
  layer (`sim.cost.kernel.two_batch_overlap`).
- `redundant_experts` (`--ep-num-redundant-experts`): EPLB's extra copies of hot experts,
  placed beside the routed ones (E + R physical experts, which ep must divide); with the
  load balanced, each rank computes (E + R) / ep experts' share of the pairs.

All need attention data parallelism; "deepep" and dense_tp_size 1 also need one GPU per
attention rank (dp_size = tp), as SGLang's DeepSeek recipes run them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.model.shape import ModelShape

A2A_BACKENDS = ("none", "deepep")


@dataclass(frozen=True)
class EPOptions:
    a2a_backend: str = "none"
    dense_tp_size: int | None = None
    dp_lm_head: bool = False
    two_batch_overlap: bool = False
    redundant_experts: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.redundant_experts, bool) or not isinstance(self.redundant_experts, int) \
                or self.redundant_experts < 0:
            raise ValueError(f"ep_num_redundant_experts must be an integer >= 0, got "
                             f"{self.redundant_experts!r}")
        if self.a2a_backend not in A2A_BACKENDS:
            raise ValueError(f"moe_a2a_backend {self.a2a_backend!r} is not one of "
                             f"{', '.join(A2A_BACKENDS)}")
        if self.dense_tp_size not in (None, 1):
            raise ValueError(f"moe_dense_tp_size must be None (tp) or 1, got "
                             f"{self.dense_tp_size!r}")

    @property
    def is_default(self) -> bool:
        return self == EPOptions()

    def check(self, attention_dp: int, tp: int) -> None:
        """ValueError naming the flag when the layout cannot carry these options."""
        if self.is_default:
            return
        if attention_dp == 1:
            raise ValueError("moe_a2a_backend, moe_dense_tp_size, enable_dp_lm_head and "
                             "enable_two_batch_overlap need attention data parallelism "
                             "(enable_dp_attention with dp_size > 1)")
        if (self.a2a_backend == "deepep" or self.dense_tp_size == 1) and attention_dp != tp:
            raise ValueError(f"moe_a2a_backend deepep and moe_dense_tp_size 1 need one GPU "
                             f"per attention rank (dp_size = tp), got dp_size={attention_dp}, "
                             f"tp={tp}")

    def physical_shape(self, model: ModelShape) -> ModelShape:
        """The model as placed: E + redundant_experts routed experts (memory and placement;
        the router's width is left at E + R too, a negligible over-count)."""
        if not self.redundant_experts:
            return model
        if model.moe is None:
            raise ValueError(f"ep_num_redundant_experts={self.redundant_experts}: "
                             f"{model.name} is a dense model")
        moe = dataclasses.replace(model.moe,
                                  num_experts=model.moe.num_experts + self.redundant_experts)
        return dataclasses.replace(model, moe=moe)

    def replicated_weight_bytes(self, model: ModelShape, tp: int) -> float:
        """Weight bytes a GPU holds beyond its 1 / tp shard: the dense MLPs and shared
        experts under dense_tp_size 1, the LM head under dp_lm_head."""
        dense = 0.0
        if self.dense_tp_size == 1:
            h, sparse = model.hidden_size, model.num_sparse_layers
            shared = model.moe.shared_intermediate_size if model.moe else 0
            dense = 3 * h * ((model.num_layers - sparse) * model.intermediate_size + sparse * shared)
        head = model.lm_head_weight_bytes if self.dp_lm_head else 0.0
        return (dense * model.module_bytes_per_param("mlp") + head) * (1 - 1 / tp)
