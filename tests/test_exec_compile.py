"""`Engine(torch_compile=True)`: compiled decode steps give the eager engine's tokens."""

import time

import pytest
from torch._dynamo.utils import counters

from exec.engine.engine import Engine

GREEDY = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}


@pytest.mark.slow
def test_compiled_decode_matches_eager(tiny_checkpoint):
    """Batch 1 and batch 3 (the two graphs: size 1 is specialised, both compiled while the
    engine is built, which then starts fresh) give the same greedy tokens as eager, and the
    KV cache the compiled steps wrote serves later steps."""
    folder, _ = tiny_checkpoint("llama")
    prompts = [[5, 9, 13, 2], [7, 7, 1], [3, 30, 60, 90, 120]]
    eager = Engine(folder, max_total_tokens=512)
    t = time.perf_counter()
    compiled = Engine(folder, max_total_tokens=512, torch_compile=True, torch_compile_max_bs=4)
    assert len(compiled.trace) == 0 and not compiled.trace.requests  # warm-up compiled, reset
    graphs = counters["stats"]["unique_graphs"]
    for batch in (prompts[:1], prompts):
        want = [o.token_ids for o in eager.generate(batch, GREEDY)]
        assert [o.token_ids for o in compiled.generate(batch, GREEDY)] == want
    assert compiled.runner.compiled is not None
    assert graphs >= 2 and counters["stats"]["unique_graphs"] == graphs  # nothing compiled late
    print(f"compile and run: {time.perf_counter() - t:.1f} s")


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_torch_compile_max_bs_must_be_a_positive_integer(tiny_checkpoint, bad):
    """A batch limit that is not a positive integer is refused, naming the option."""
    folder, _ = tiny_checkpoint("llama")
    with pytest.raises(ValueError, match="torch_compile_max_bs"):
        Engine(folder, max_total_tokens=64, torch_compile=True, torch_compile_max_bs=bad)
