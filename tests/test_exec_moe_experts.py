"""exec's grouped expert execution (`exec.layers.fused_experts`) against a per-token reference."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from exec.layers.fused_experts import fused_experts


def _per_token(x, gate_up, down, ids, weights):
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for e, w in zip(ids[t].tolist(), weights[t], strict=True):
            gate, up = (gate_up[e] @ x[t]).chunk(2)
            out[t] += w * (down[e] @ (torch.nn.functional.silu(gate) * up))
    return out


@settings(max_examples=30, deadline=None)
@given(t=st.integers(1, 9), e=st.integers(1, 6), k=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_grouped_experts_equal_each_token_through_its_own_experts(t, e, k, seed):
    """Any routing (repeats, unused experts): the grouped result is the per-token sum."""
    g = torch.Generator().manual_seed(seed)
    h, i = 8, 6
    x = torch.randn(t, h, generator=g)
    gate_up, down = torch.randn(e, 2 * i, h, generator=g), torch.randn(e, h, i, generator=g)
    ids = torch.randint(0, e, (t, k), generator=g)
    weights = torch.rand(t, k, generator=g)
    want = _per_token(x, gate_up, down, ids, weights)
    torch.testing.assert_close(fused_experts(x, gate_up, down, ids, weights), want, rtol=1e-5, atol=1e-5)
