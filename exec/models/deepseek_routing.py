"""DeepSeek-V3's router (`noaux_tc`), as transformers' `DeepseekV3TopkRouter` runs it:

1. scores: sigmoid (V3) or softmax of the router logits, in float32;
2. choosing only: scores + `e_score_correction_bias`; the experts form `n_group` groups, a
   group's score is the sum of its best two; the `topk_group` best groups are eligible;
3. the top-k eligible experts by biased score;
4. their weights are the unbiased scores, renormalised to sum to 1 when `norm_topk_prob`,
   then times `routed_scaling_factor`.

Shapes: T tokens, E experts, k experts per token.
"""

from __future__ import annotations

import torch

from shared.config.moe_config import MoEConfig

GROUP_BEST = 2   # V3 scores a group by the sum of its two best experts


def route(logits: torch.Tensor, bias: torch.Tensor | None, moe: MoEConfig
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """logits: [T, E] float32; bias: [E] or None. Returns (ids [T, k] int64, weights [T, k]
    float32)."""
    scores = logits.sigmoid() if moe.scoring == "sigmoid" else logits.softmax(dim=-1)  # [T, E]
    choice = scores if bias is None else scores + bias.float()
    choice = _eligible(choice, moe.n_group, moe.topk_group)
    ids = torch.topk(choice, moe.experts_per_token, dim=-1, sorted=False).indices     # [T, k]
    weights = scores.gather(1, ids)
    if moe.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return ids, weights * moe.routed_scaling_factor


def _eligible(choice: torch.Tensor, n_group: int, topk_group: int) -> torch.Tensor:
    """choice [T, E] with the experts outside each token's `topk_group` best groups at -inf."""
    if topk_group >= n_group:
        return choice
    t, e = choice.shape
    grouped = choice.view(t, n_group, e // n_group)                          # [T, G, E/G]
    best = min(GROUP_BEST, e // n_group)
    group_scores = grouped.topk(best, dim=-1).values.sum(dim=-1)             # [T, G]
    groups = torch.topk(group_scores, topk_group, dim=-1, sorted=False).indices
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, groups, True)
    return grouped.masked_fill(~keep[:, :, None], float("-inf")).view(t, e)
