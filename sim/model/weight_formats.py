"""Per-module weight formats: which groups of a model's weights a quantized checkpoint (or a
run's `--quantization`) leaves in 16 bits (`sim.hardware.precision` module doc).

A model's weights fall in six groups, each priced at its own dtype's bytes (and, for the
GEMMs, its own tensor-core peak):

| group | weights |
|---|---|
| attention | q/k/v/o projections (MLA: q_a, q_b, kv_a, kv_b) |
| router | a sparse layer's expert router |
| mlp | the dense layers' MLPs and the sparse layers' shared experts |
| experts | the routed experts |
| embedding | the token embeddings |
| lm_head | the LM head (the embeddings when tied) |

The groups a checkpoint leaves unquantized come from its `quantization_config`'s
`modules_to_not_convert` (Hugging Face's name; `ignored_layers` / `ignore` elsewhere), matched
by module name: `self_attn` / `attn` -> attention, `router` / `mlp.gate` (not `gate_proj`)
-> router, `shared_expert` -> mlp, `experts` -> experts, `mlp` alone -> mlp, router and
experts, `embed_tokens` -> embedding, `lm_head` -> lm_head (a `re:` prefix and a `$` end
are read as part of the name). Besides those, the router, the embeddings and the LM head
stay in 16 bits by default (`UNQUANTIZED_BY_DEFAULT`). NOTE: a group is the unit: one
module of a group named (say one layer's MLP) keeps the whole group in 16 bits, an upper
bound on its bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MODULE_GROUPS = ("attention", "router", "mlp", "experts", "embedding", "lm_head")
UNQUANTIZED_BY_DEFAULT = ("router", "embedding", "lm_head")

# (pattern over a module name, the groups it names), first match wins
_RULES = (
    (re.compile(r"(^|[.*])(self_attn|attn|attention)([.*]|$)"), ("attention",)),
    (re.compile(r"(^|[.*])(router|gate)([.*]|$)"), ("router",)),
    (re.compile(r"shared_experts?([.*]|$)"), ("mlp",)),
    (re.compile(r"(^|[.*])experts([.*]|$)"), ("experts",)),
    (re.compile(r"(^|[.*])(mlp|feed_forward|block_sparse_moe)(\.\*)?$"), ("mlp", "router", "experts")),
    (re.compile(r"(^|[.*])(mlp|feed_forward)([.*]|$)"), ("mlp",)),
    (re.compile(r"embed_tokens|wte|word_embeddings"), ("embedding",)),
    (re.compile(r"lm_head|output_layer"), ("lm_head",)),
)


def unquantized_groups(modules_to_not_convert: Iterable[str]) -> tuple[str, ...]:
    """The groups (MODULE_GROUPS order) left in 16 bits: the default ones and those the
    checkpoint's module names name (module doc); names matching no rule are ignored."""
    groups = set(UNQUANTIZED_BY_DEFAULT)
    for name in modules_to_not_convert:
        name = str(name).removeprefix("re:").removesuffix("$")
        groups.update(next((g for pattern, g in _RULES if pattern.search(name)), ()))
    return tuple(g for g in MODULE_GROUPS if g in groups)


def check_groups(groups: Iterable[str], model: str) -> tuple[str, ...]:
    """`groups` as a tuple; ValueError naming an unknown group."""
    groups = tuple(groups)
    unknown = [g for g in groups if g not in MODULE_GROUPS]
    if unknown:
        raise ValueError(f"{model}: unknown weight group(s) {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(MODULE_GROUPS)}")
    return groups


def gemm_group(name: str) -> str:
    """The group of a GEMM of `sim.model.layer_gemms` by its name."""
    if name == "router":
        return "router"
    return "mlp" if name.startswith(("mlp_", "shared_")) else "attention"
