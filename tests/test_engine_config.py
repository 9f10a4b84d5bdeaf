"""EngineConfig defaults, validation and `resolve` (semantics §3.1), the decode CUDA-graph
batch sizes and graph-or-eager decision (§9.2–§9.3), and ForwardMode's predicates (§8.1)."""

import dataclasses
import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.batch.cuda_graph import can_run_graph, cuda_graph_batch_sizes, padded_batch_size
from shared.batch.forward_mode import ForwardMode
from shared.config.engine_config import EngineConfig, ModelInfo

MODEL = ModelInfo(vocab_size=100, eos_token_ids=(0,), context_length=64)


def _ref_est(cap, ctx):
    return min(max(int(cap / ctx * 512), 2048), 4096)


def _ref_graph_sizes(max_bs, max_running):
    """§9.2 written as step runs: (start, stop inclusive, step)."""
    runs = [(1, 2, 1), (4, 12, 4), (16, 256, 8), (272, 511, 16), (512, max_bs, 32)]
    sizes = set()
    for start, stop, step in runs:
        s = start
        while s <= stop:
            sizes.add(s)
            s += step
    sizes = {s for s in sizes if s <= max_bs} | {max_bs}
    return sorted(s for s in sizes if max_running is None or s <= max_running)


# --- defaults and validation -----------------------------------------------------------


def test_defaults_equal_sglangs():
    """Unset fields read as SGLang's server-argument defaults."""
    c = EngineConfig()
    assert (c.page_size, c.max_prefill_tokens, c.chunked_prefill_size) == (1, 16384, 8192)
    assert (c.schedule_policy, c.random_seed, c.schedule_conservativeness) == ("fcfs", 0, 1.0)
    assert (c.enable_mixed_chunk, c.disable_radix_cache, c.disable_cuda_graph) == (False,) * 3
    assert (c.max_total_tokens, c.max_running_requests, c.cuda_graph_max_bs,
            c.context_length) == (None,) * 4


@pytest.mark.parametrize(("field", "value"), [
    ("page_size", 0), ("page_size", -4), ("max_prefill_tokens", 0),
    ("max_prefill_tokens", -1), ("schedule_policy", "lifo"),
])
def test_construction_rejects_bad_values_naming_the_field(field, value):
    """page_size < 1, max_prefill_tokens <= 0 and unknown policies raise, naming the field."""
    with pytest.raises(ValueError, match=field):
        EngineConfig(**{field: value})


@pytest.mark.parametrize(("ps", "chunk"), [(4, 6), (16, 100), (2, 3)])
def test_chunk_size_need_not_be_a_multiple_of_the_page_size(ps, chunk):
    """A chunk budget that is not whole pages is accepted and kept as given."""
    c = EngineConfig(page_size=ps, chunked_prefill_size=chunk)
    assert c.chunk_size == chunk


# --- resolve ---------------------------------------------------------------------------


def test_resolve_takes_the_context_length_from_the_model_unless_set():
    """context_length None -> the model's; a user value is kept."""
    assert EngineConfig().resolve(MODEL, 1000).context_length == 64
    assert EngineConfig(context_length=32).resolve(MODEL, 1000).context_length == 32


def test_resolve_refuses_a_context_longer_than_the_models():
    """context_length above the model's (positions it never saw) is refused, naming both."""
    with pytest.raises(ValueError, match=r"context_length \(65\).*model's context length \(64\)"):
        EngineConfig(context_length=65).resolve(MODEL, 1000)


def test_max_forward_tokens_needs_the_effective_config():
    """Before resolve the bound is undefined and says so; after, it covers decode and extend."""
    with pytest.raises(ValueError, match="effective config"):
        EngineConfig().max_forward_tokens()
    c = EngineConfig(chunked_prefill_size=None, max_prefill_tokens=100, enable_mixed_chunk=True,
                     max_running_requests=8).resolve(MODEL, 1000)
    assert c.max_forward_tokens() == 100 + 8
    assert EngineConfig(chunked_prefill_size=16, max_running_requests=40).resolve(
        MODEL, 1000).max_forward_tokens() == 40


@given(ps=st.sampled_from((1, 2, 4, 16)), cap=st.integers(32, 100_000))
def test_resolve_rounds_the_kv_capacity_down_to_whole_pages(ps, cap):
    """max_total_tokens None -> kv_capacity // page_size * page_size."""
    c = EngineConfig(page_size=ps).resolve(MODEL, cap)
    assert c.max_total_tokens == cap // ps * ps


@given(cap=st.integers(2, 2_000_000), ctx=st.integers(1, 200_000),
       user=st.one_of(st.none(), st.integers(1, 10_000)))
def test_resolve_derives_max_running_requests_as_sglang(cap, ctx, user):
    """§3.1: est = clamp(int(cap/ctx*512), 2048, 4096); user -> min(user, est), else
    min(est, cap // 2)."""
    model = ModelInfo(MODEL.vocab_size, MODEL.eos_token_ids, 200_000)
    c = EngineConfig(max_running_requests=user, context_length=ctx).resolve(model, cap)
    est = _ref_est(cap, ctx)
    assert c.max_running_requests == (min(user, est) if user is not None else min(est, cap // 2))


@pytest.mark.parametrize(("chunk", "want"), [(0, None), (-1, None), (None, None), (512, 512)])
def test_resolve_turns_disabled_chunking_into_none(chunk, want):
    """chunked_prefill_size <= 0 (or None) resolves to None; a positive size is kept."""
    assert EngineConfig(chunked_prefill_size=chunk).resolve(MODEL, 1000).chunked_prefill_size == want


def test_resolve_defaults_cuda_graph_max_bs_to_160():
    """cuda_graph_max_bs None -> 160; a user value is kept."""
    assert EngineConfig().resolve(MODEL, 1000).cuda_graph_max_bs == 160
    assert EngineConfig(cuda_graph_max_bs=24).resolve(MODEL, 1000).cuda_graph_max_bs == 24


def test_resolve_without_any_capacity_raises():
    """No max_total_tokens and no kv_capacity: nothing to size the KV pool from."""
    with pytest.raises(ValueError, match="max_total_tokens"):
        EngineConfig().resolve(MODEL)


def test_resolve_prefers_the_users_max_total_tokens():
    """A set max_total_tokens is used (rounded to pages) instead of kv_capacity."""
    c = EngineConfig(page_size=4, max_total_tokens=1003).resolve(MODEL, 50_000)
    assert c.max_total_tokens == 1000


@given(ps=st.sampled_from((1, 4)), cap=st.integers(16, 50_000),
       user=st.one_of(st.none(), st.integers(1, 5000)), chunk=st.sampled_from((None, 0, 64)))
def test_resolving_twice_is_idempotent(ps, cap, user, chunk):
    """resolve(resolve(c)) == resolve(c): the effective config is a fixed point."""
    once = EngineConfig(page_size=ps, max_running_requests=user,
                        chunked_prefill_size=chunk).resolve(MODEL, cap)
    assert once.resolve(MODEL, cap) == once
    assert once.resolve(MODEL) == once


# --- CUDA-graph batch sizes ------------------------------------------------------------


def test_default_graph_sizes_are_the_sglang_list_up_to_160():
    """max_bs 160: [1, 2, 4, 8, 12] then 16..160 step 8."""
    sizes = cuda_graph_batch_sizes(EngineConfig().resolve(MODEL, 1_000_000))
    assert sizes == [1, 2, 4, 8, 12, *range(16, 161, 8)]


@given(max_bs=st.integers(1, 1200), max_running=st.one_of(st.none(), st.integers(1, 1200)))
def test_graph_sizes_follow_the_sglang_schedule_and_caps(max_bs, max_running):
    """§9.2's step runs, capped at cuda_graph_max_bs (included) and max_running_requests."""
    c = EngineConfig(cuda_graph_max_bs=max_bs, max_running_requests=max_running)
    assert cuda_graph_batch_sizes(c) == _ref_graph_sizes(max_bs, max_running)


def test_graph_sizes_past_512_step_by_32_and_include_max_bs():
    """max_bs 600: ..., 496, 512, 544, 576, 600."""
    sizes = cuda_graph_batch_sizes(EngineConfig(cuda_graph_max_bs=600))
    assert sizes[-6:] == [480, 496, 512, 544, 576, 600]


def test_graph_sizes_are_empty_when_graphs_are_disabled():
    """disable_cuda_graph -> no captured sizes at all."""
    assert cuda_graph_batch_sizes(EngineConfig(disable_cuda_graph=True, cuda_graph_max_bs=64)) == []


SIZES = [1, 2, 4, 8, 12, 16, 24]


@pytest.mark.parametrize(("bs", "want"), [(1, 1), (3, 4), (4, 4), (9, 12), (13, 16), (24, 24),
                                          (25, 25), (100, 100)])
def test_padded_batch_size_is_the_smallest_captured_size_at_least_bs(bs, want):
    """bisect_left into the captured sizes; bs itself beyond the largest."""
    assert padded_batch_size(bs, SIZES) == want


@given(bs=st.integers(1, 300))
def test_padded_batch_size_is_minimal(bs):
    """The padded size is >= bs, and no captured size lies in [bs, padded)."""
    sizes = cuda_graph_batch_sizes(EngineConfig())
    padded = padded_batch_size(bs, sizes)
    assert padded >= bs
    assert padded in sizes or (padded == bs and bs > sizes[-1])
    assert not [s for s in sizes if bs <= s < padded]


# An IDLE batch is empty by definition, so IDLE appears only with bs 0.
GRAPH_CASES = [(m, bs) for m in ForwardMode for bs in (0, 1, 23, 24, 25)
               if m != ForwardMode.IDLE or bs == 0]


@pytest.mark.parametrize(("mode", "bs"), GRAPH_CASES)
def test_can_run_graph_only_for_decode_batches_within_the_largest_size(mode, bs):
    """A graph replays for DECODE with 0 < bs <= the largest size; never with no sizes."""
    fb = SimpleNamespace(forward_mode=mode, batch_size=bs)
    assert can_run_graph(fb, SIZES) == (mode == ForwardMode.DECODE and 0 < bs <= 24)
    assert can_run_graph(fb, []) is False


# --- ForwardMode -----------------------------------------------------------------------


def test_forward_mode_values_and_predicates():
    """Values 1..4; is_extend for EXTEND and MIXED; is_cuda_graph for DECODE and IDLE."""
    M = ForwardMode
    assert [int(m) for m in (M.EXTEND, M.DECODE, M.MIXED, M.IDLE)] == [1, 2, 3, 4]
    table = {  # predicate: members it is true for
        "is_extend": {M.EXTEND, M.MIXED}, "is_prefill": {M.EXTEND, M.MIXED},
        "is_decode": {M.DECODE}, "is_mixed": {M.MIXED}, "is_idle": {M.IDLE},
        "is_decode_or_idle": {M.DECODE, M.IDLE}, "is_cuda_graph": {M.DECODE, M.IDLE},
        "is_cpu_graph": {M.DECODE},
    }
    for name, members in table.items():
        assert {m for m in M if getattr(m, name)()} == members, name


# --- serialisation ---------------------------------------------------------------------


@pytest.mark.parametrize("config", [
    EngineConfig(),
    EngineConfig(page_size=4, chunked_prefill_size=-1, schedule_policy="lpm", random_seed=7,
                 enable_mixed_chunk=True, schedule_conservativeness=0.3),
    EngineConfig(page_size=16).resolve(MODEL, 4096),
])
def test_engine_config_round_trips_through_json(config):
    """from_dict(json(to_dict(c))) == c, resolved or not."""
    assert EngineConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_model_info_round_trips_through_json():
    """ModelInfo's eos ids travel as a list and come back as the same tuple."""
    info = ModelInfo(vocab_size=32000, eos_token_ids=[2, 32001], context_length=4096)
    d = json.loads(json.dumps(info.to_dict()))
    assert d["eos_token_ids"] == [2, 32001]
    back = ModelInfo.from_dict(d)
    assert back == info and back.eos_token_ids == (2, 32001)
    assert dataclasses.asdict(back) == dataclasses.asdict(info)


@pytest.mark.parametrize("name", ["enable_mixed_chunk", "disable_radix_cache", "disable_cuda_graph",
                                  "disable_overlap_schedule", "guaranteed_no_evict"])
@pytest.mark.parametrize("value", ["no", 1, None])
def test_switches_must_be_booleans(name, value):
    """A switch given as a string, an int or None is refused naming it (a string 'no' would
    otherwise read as true)."""
    with pytest.raises(ValueError, match=f"{name} must be True or False"):
        EngineConfig(**{name: value})
