"""PackedLinear: a pre-packed oneDNN weight gives the plain linear layer's results."""

import pytest
import torch
from torch import nn

from exec.layers.packed_linear import PackedLinear, can_pack


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 7, 64])
def test_packed_linear_matches_plain_linear(dtype, rows):
    """Same outputs (bf16 bit for bit, fp32 to rounding) for any number of rows, with bias."""
    if not can_pack(torch.device("cpu"), dtype):
        pytest.skip(f"this torch build or CPU cannot pack {dtype} weights for oneDNN")
    torch.manual_seed(0)
    plain = nn.Linear(96, 200, bias=True).to(dtype)
    x = torch.randn(rows, 96).to(dtype)
    got, want = PackedLinear.of(plain)(x), plain(x)
    assert got.dtype == want.dtype and got.shape == (rows, 200)
    tol = 0 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)


def test_packing_is_cpu_float_only():
    """No packing for float16 or for non-CPU devices (their plain kernels are used)."""
    assert not can_pack(torch.device("cpu"), torch.float16)
    assert not can_pack(torch.device("meta"), torch.float32)
