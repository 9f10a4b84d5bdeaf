"""Req: prefix caps, extend lengths and logprob starts (semantics §2.1)."""

import pytest

from shared import Req, SamplingParams
from shared.memory.kv_memory import KVMemory


def _memory(**kw):
    return KVMemory.build(max_running_requests=4, max_context_len=64, max_total_tokens=128, **kw)


def _cache_prompt(mem, tokens):
    """Serve `tokens` once so that the radix cache holds them."""
    r = Req("warm", tokens, SamplingParams(max_new_tokens=1))
    r.init_next_round_input(mem.tree_cache)
    mem.alloc_for_extend([r])
    r.kv_committed_len = len(r.fill_ids)
    r.output_ids.append(0)
    mem.release_kv_cache(r)


def test_prefix_match_leaves_one_token_to_compute():
    """A fully cached prompt still extends its last token (prefix capped at len - 1)."""
    mem = _memory()
    _cache_prompt(mem, [1, 2, 3, 4])
    r = Req("a", [1, 2, 3, 4])
    r.init_next_round_input(mem.tree_cache)
    assert (len(r.prefix_indices), r.extend_input_len) == (3, 1)


def test_prefix_match_capped_at_logprob_start():
    """Input logprobs from position 1 on need those rows computed: prefix <= 1."""
    mem = _memory()
    _cache_prompt(mem, [1, 2, 3, 4])
    r = Req("a", [1, 2, 3, 4], SamplingParams(return_logprob=True, logprob_start_len=1))
    r.init_next_round_input(mem.tree_cache)
    assert (len(r.prefix_indices), r.extend_input_len, r.extend_logprob_start_len) == (1, 3, 0)


def test_logprob_start_defaults_follow_sglang():
    """No logprobs -> -1; logprobs without a start -> the prompt length (outputs only)."""
    assert Req("a", [1, 2, 3]).logprob_start_len == -1
    assert Req("b", [1, 2, 3], SamplingParams(logprob_start_len=1)).logprob_start_len == -1
    assert Req("c", [1, 2, 3], SamplingParams(return_logprob=True)).logprob_start_len == 3


def test_extend_logprob_start_is_relative_and_clamped():
    """extend_logprob_start_len = min(max(start, prefix) - prefix, extend)."""
    r = Req("a", list(range(10)), SamplingParams(return_logprob=True, logprob_start_len=7))
    r.init_next_round_input(None)
    assert r.extend_logprob_start_len == 7
    r.set_extend_input_len(4)
    assert r.extend_logprob_start_len == 4


def test_releasing_kv_twice_raises():
    """pop_committed_kv_cache refuses a second release of the same request."""
    r = Req("a", [1])
    r.pop_committed_kv_cache()
    with pytest.raises(RuntimeError, match="twice"):
        r.pop_committed_kv_cache()
