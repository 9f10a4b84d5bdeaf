"""Batching is invisible (ARCHITECTURE §6.3): packed, prefix-cached, chunked, mixed and retracted
runs give each request the greedy tokens it gets alone with no cache."""

import pytest

from exec.engine.engine import Engine

SYSTEM = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
PROMPTS = [SYSTEM + [30 + i, 40 + i, 50 + i][: 1 + i % 3] for i in range(6)] + [[9, 8, 7], [200]]
GREEDY = {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def alone(tiny_checkpoint):
    """Each prompt run by itself, radix cache disabled, no chunking."""
    folder, _ = tiny_checkpoint("llama")
    engine = Engine(folder, max_total_tokens=512, disable_radix_cache=True, chunked_prefill_size=None)
    return [engine.generate(p, GREEDY).token_ids for p in PROMPTS]


CASES = {
    "packed": dict(chunked_prefill_size=None, disable_radix_cache=True),
    "prefix_cached": dict(chunked_prefill_size=None),
    "chunk_1": dict(chunked_prefill_size=1),
    "chunk_3": dict(chunked_prefill_size=3),
    "chunk_page_plus_1": dict(page_size=4, chunked_prefill_size=5),
    "chunk_2page_minus_1": dict(page_size=4, chunked_prefill_size=7),
    "mixed": dict(chunked_prefill_size=4, enable_mixed_chunk=True),
    "retracted": dict(max_total_tokens=64, schedule_conservativeness=0.02, chunked_prefill_size=8),
    "paged_lpm": dict(page_size=4, schedule_policy="lpm", chunked_prefill_size=6),
}


@pytest.mark.parametrize("case", CASES)
def test_batched_runs_match_requests_run_alone(tiny_checkpoint, alone, case):
    """Same greedy tokens per request, however the scheduler batched, cached or chunked it."""
    folder, _ = tiny_checkpoint("llama")
    engine = Engine(folder, **{"max_total_tokens": 512, **CASES[case]})
    if case == "prefix_cached":
        engine.generate(PROMPTS[0], GREEDY)   # warm the cache with the shared system prompt
    outs = engine.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in outs] == alone
    modes = {s.forward_mode for s in engine.trace.steps}
    if case == "mixed":
        assert "MIXED" in modes
    if case == "retracted":
        assert sum(r.num_retractions for r in engine.trace.requests.values()) > 0
    if case == "prefix_cached":
        assert all(o.meta["cached_tokens"] >= len(SYSTEM) for o in outs[:6])
    engine.scheduler.mem.check_idle()
