"""`elementwise_row_bytes`: the bytes one token row moves through a forward's memory-bound
elementwise kernels (norms, rotary, the gated activation), which the kernel cost model
prices at the streaming memory rate beside the GEMMs and attention."""

from __future__ import annotations

from typing import NamedTuple

from sim.model.shape import ModelShape


class ElementwiseBytes(NamedTuple):
    """Bytes one token row moves through a forward's elementwise kernels (every layer)."""

    attention: float   # the norms and rotary, on an attention rank's rows
    mlp: float         # the dense MLPs' gated activation, on the rows the MLP runs


def elementwise_row_bytes(model: ModelShape, attention_tp: int, mlp_tp: int,
                          act_bytes: int) -> ElementwiseBytes:
    """Per layer and row: two fused residual-add + RMSNorm kernels (each reads the input and
    the residual, writes both: 4 x hidden), rotary over this rank's query and key heads
    (reads and writes their rotated dims; MLA's rope dims of every head and the shared key),
    and in a dense layer the gated activation (reads 2 x intermediate, writes intermediate,
    this rank's shard); a sparse layer's is its experts' (`_moe_traffic`) and its shared
    experts' (3 x shared intermediate)."""
    m, h = model, model.hidden_size
    if m.mla is not None:
        rotary = 2 * (m.num_heads // attention_tp + 1) * m.mla.qk_rope_head_dim
    else:
        rotary = 2 * (m.num_heads + max(m.num_kv_heads, attention_tp)) * m.head_dim // attention_tp
    sparse = m.num_sparse_layers
    shared = 0 if m.moe is None else m.moe.shared_intermediate_size
    gated = ((m.num_layers - sparse) * 3 * m.intermediate_size + sparse * 3 * shared) / mlp_tp
    return ElementwiseBytes(m.num_layers * (8 * h + rotary) * act_bytes, gated * act_bytes)
