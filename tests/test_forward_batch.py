"""`ForwardBatch.init_new` (semantics §8.2–§8.3, §10.2) on batches a real Scheduler builds."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.batch.forward_batch import ForwardBatch
from shared.batch.forward_mode import ForwardMode
from shared.batch.logit_rows import select_logit_rows
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.scheduler import Scheduler
from shared.request.req import Req
from shared.request.sampling_params import SamplingParams
from tests.scripted_runner import ScriptedRunner, drive
from tests.strategies import scheduler_cases

MODEL = ModelInfo(vocab_size=64, eos_token_ids=(0,), context_length=256)
BASE = dict(max_total_tokens=512, chunked_prefill_size=None, disable_cuda_graph=True,
            disable_overlap_schedule=True)  # exact steps below; the random cases draw both
EXTEND_ARRAYS = ("extend_prefix_lens", "extend_seq_lens", "extend_start_loc",
                 "extend_logprob_start_lens")


def _params(max_new=3, **kw):
    return SamplingParams(max_new_tokens=max_new, ignore_eos=True, **kw)


def _snapshot(batch):
    """Everything init_new could change: public arrays, mode, requests, the KV table."""
    arrays = {k: v.copy() for k, v in vars(batch).items()
              if isinstance(v, np.ndarray) and not k.startswith("_")}
    reqs = [(r, list(r.fill_ids), r.extend_input_len, r.extend_logprob_start_len,
             list(r.output_ids)) for r in batch.reqs]
    mem = batch.mem
    return (arrays, batch.forward_mode, reqs, mem.req_to_token_pool.req_to_token.copy(),
            mem.allocator.available_size())


def _assert_same(a, b):
    (arrays_a, mode_a, reqs_a, table_a, free_a), (arrays_b, mode_b, reqs_b, table_b, free_b) = a, b
    assert arrays_a.keys() == arrays_b.keys()
    assert all(np.array_equal(arrays_a[k], arrays_b[k]) for k in arrays_a)
    assert (mode_a, reqs_a, free_a) == (mode_b, reqs_b, free_b) and np.array_equal(table_a, table_b)


def _run(reqs, on_step=None, **cfg):
    """Drive a Scheduler over `reqs` (added on arrival); return every step's ForwardBatch.
    `on_step(batch, fb)` runs right after init_new, before the step's result is applied."""
    sched = Scheduler(EngineConfig(**{**BASE, **cfg}), MODEL)
    fbs = []

    def build(batch):
        before = _snapshot(batch)
        fb = ForwardBatch.init_new(batch)
        _assert_same(before, _snapshot(batch))
        if on_step:
            on_step(batch, fb)
        fbs.append(fb)
        return fb

    drive(sched, ScriptedRunner(MODEL.vocab_size), reqs, max_steps=2000, build=build)
    return fbs


def _two_requests(**kw_a):
    return [Req("a", [5, 6, 7, 8, 9], _params(**kw_a)), Req("b", [11, 12, 13], _params())]


def _check_batch(batch, fb, prompts):
    """Every init_new invariant that holds for any batch."""
    b, t = len(batch.reqs), len(batch.input_ids)
    assert fb.batch_size == b and fb.forward_mode == batch.forward_mode
    assert len(fb.positions) == len(fb.input_ids) == len(fb.out_cache_loc) == fb.extend_num_tokens == t
    assert len(fb.req_pool_indices) == len(fb.seq_lens) == len(fb.sampling_seeds) == b
    assert all(a.dtype == np.int64 for a in (fb.positions, fb.input_ids, fb.out_cache_loc))
    if fb.forward_mode.is_decode():
        assert t == b and all(len(getattr(fb, k)) == 0 for k in EXTEND_ARRAYS)
        assert fb.logit_rows.pruned_rows.tolist() == list(range(b))
        assert fb.logit_rows.sample_indices.tolist() == list(range(b))
        return
    assert all(len(getattr(fb, k)) == b for k in EXTEND_ARRAYS)
    assert int(fb.extend_seq_lens.sum()) == t
    ext, starts = fb.extend_seq_lens, fb.extend_logprob_start_lens
    want = select_logit_rows(ext, starts if fb.return_logprob and (starts < ext).any() else None)
    assert fb.logit_rows.pruned_rows.tolist() == want.pruned_rows.tolist()
    assert fb.logit_rows.sample_indices.tolist() == want.sample_indices.tolist()
    assert fb.logit_rows.input_logprob_indices.tolist() == want.input_logprob_indices.tolist()
    _check_logprob_token_ids(fb, prompts)


def _check_logprob_token_ids(fb, prompts):
    """Each input-logprob row's token is the prompt token after its position, 0 past it."""
    rows = fb.logit_rows.pruned_rows[fb.logit_rows.input_logprob_indices]
    if fb.extend_input_logprob_token_ids is None:
        assert len(rows) == 0
        return
    owner = np.searchsorted(fb.extend_start_loc, rows, side="right") - 1
    want = []
    for h, i in zip(rows.tolist(), owner.tolist(), strict=True):
        prompt, nxt = prompts[fb.rids[i]], int(fb.positions[h]) + 1
        want.append(prompt[nxt] if nxt < len(prompt) else 0)
    assert fb.extend_input_logprob_token_ids.tolist() == want


# --- one extend, then decodes ----------------------------------------------------------


def test_extend_and_decode_batches_have_consistent_field_lengths():
    """[T] arrays share one length (extend_num_tokens, or B for decode); [B] arrays have B."""
    reqs = _two_requests()
    prompts = {r.rid: list(r.origin_input_ids) for r in reqs}
    fbs = _run(reqs, on_step=lambda batch, fb: _check_batch(batch, fb, prompts))
    modes = [fb.forward_mode for fb in fbs]
    assert modes == [ForwardMode.EXTEND, ForwardMode.DECODE, ForwardMode.DECODE]
    assert fbs[0].extend_num_tokens == 8 and fbs[1].extend_num_tokens == 2


def test_decode_batches_leave_the_four_extend_arrays_empty():
    """DECODE: extend_prefix/seq/start/logprob_start arrays are empty int64 arrays."""
    dec = _run(_two_requests())[1]
    for k in EXTEND_ARRAYS:
        assert getattr(dec, k).shape == (0,) and getattr(dec, k).dtype == np.int64, k


def test_req_to_token_view_is_read_only_and_the_pool_stays_writable():
    """Writing through fb.req_to_token raises; the scheduler's own table is unaffected."""
    seen = []

    def on_step(batch, fb):
        with pytest.raises(ValueError):
            fb.req_to_token[0, 0] = 5
        assert batch.mem.req_to_token_pool.req_to_token.flags.writeable
        assert np.shares_memory(fb.req_to_token, batch.mem.req_to_token_pool.req_to_token)
        seen.append(fb.forward_mode)

    _run(_two_requests(), on_step=on_step)
    assert ForwardMode.DECODE in seen


def test_logit_rows_are_each_requests_last_row_or_every_decode_row():
    """Extend without logprobs: cumsum(extend_lens) - 1; decode: arange(B)."""
    ext, dec = _run(_two_requests())[:2]
    assert ext.logit_rows.pruned_rows.tolist() == [4, 7]
    assert ext.logit_rows.sample_indices.tolist() == [0, 1]
    assert dec.logit_rows.pruned_rows.tolist() == [0, 1]
    assert dec.logit_rows.input_logprob_indices.tolist() == []


def test_sampling_seeds_default_to_42_and_honour_the_request():
    """sampling_seed None -> 42; a set seed is passed through, per request, in batch order."""
    reqs = [Req("a", [1, 2], _params()), Req("b", [3, 4], _params(sampling_seed=7)),
            Req("c", [5], _params(sampling_seed=0))]
    for fb in _run(reqs):
        assert dict(zip(fb.rids, fb.sampling_seeds.tolist(), strict=True)) == {"a": 42, "b": 7, "c": 0}
        assert fb.sampling_seeds.dtype == np.int64


def test_input_logprob_rows_predict_the_next_prompt_token():
    """logprob_start_len 0: rows 0..4 of 'a' predict 6, 7, 8, 9 and 0 (past the prompt);
    'b' (no logprobs) adds no rows and is sampled from its last row."""
    ext = _run(_two_requests(return_logprob=True, logprob_start_len=0))[0]
    assert ext.return_logprob
    assert ext.extend_logprob_start_lens.tolist() == [0, 3]
    assert ext.logit_rows.pruned_rows.tolist() == [0, 1, 2, 3, 4, 7]
    assert ext.logit_rows.sample_indices.tolist() == [4, 5]
    assert ext.logit_rows.input_logprob_indices.tolist() == [0, 1, 2, 3, 4]
    assert ext.extend_input_logprob_token_ids.tolist() == [6, 7, 8, 9, 0]


def test_chunked_logprob_rows_predict_the_first_token_of_the_next_chunk():
    """Chunks of 4 over a 10-token prompt: each chunk's last row predicts the next chunk's
    first token; only the final chunk's last row gets 0."""
    prompt = list(range(20, 30))
    req = Req("a", prompt, _params(max_new=1, return_logprob=True, logprob_start_len=0))
    fbs = _run([req], chunked_prefill_size=4)
    ids = [fb.extend_input_logprob_token_ids.tolist() for fb in fbs]
    assert ids == [[21, 22, 23, 24], [25, 26, 27, 28], [29, 0]]


def test_a_retracted_requests_reprefill_gives_0_past_the_prompt():
    """b is retracted (tight KV, low conservativeness), then re-prefilled over prompt +
    outputs: its logprob rows from position 2 predict 9, 10, then 0 for every output row."""
    reqs = [Req("a", [1, 2, 3, 4, 5], _params(20)),
            Req("b", [6, 7, 8, 9, 10], _params(20, return_logprob=True, logprob_start_len=2),
                arrival_time=0.005)]
    fbs = _run(reqs, max_total_tokens=40, schedule_conservativeness=0.05)
    assert reqs[1].retraction_count == 1
    again = [fb for fb in fbs if fb.forward_mode.is_extend() and fb.rids == ("b",)][-1]
    assert again.extend_seq_lens.tolist() == [5 + 16] and again.extend_logprob_start_lens.tolist() == [2]
    assert again.extend_input_logprob_token_ids.tolist() == [9, 10] + [0] * 17


def test_mixed_batches_without_logprobs_have_no_input_logprob_rows():
    """§10.1: no request asks for logprobs -> the MIXED batch selects last rows only."""
    reqs = [Req("a", [1, 2, 3, 4, 5], _params(4)),
            Req("b", [6, 7, 8, 9, 10, 11], _params(3), arrival_time=0.005)]
    mixed = [fb for fb in _run(reqs, enable_mixed_chunk=True) if fb.forward_mode.is_mixed()]
    assert len(mixed) == 1 and not mixed[0].return_logprob
    assert mixed[0].logit_rows.pruned_rows.tolist() == [5, 6]
    assert mixed[0].logit_rows.input_logprob_indices.tolist() == []


def test_decode_batches_carry_no_input_logprob_token_ids():
    """DECODE has no input-logprob rows, so no extend_input_logprob_token_ids either."""
    dec = _run(_two_requests(return_logprob=True, logprob_start_len=0))[1]
    assert dec.forward_mode == ForwardMode.DECODE
    ids = dec.extend_input_logprob_token_ids
    assert ids is None or len(ids) == 0


# --- random workloads ------------------------------------------------------------------

logprob_specs = st.tuples(st.sampled_from(("none", "output", "start")), st.floats(0, 1),
                          st.one_of(st.none(), st.integers(0, 2**31)))


@given(case=scheduler_cases(), specs=st.lists(logprob_specs, min_size=1, max_size=8))
def test_init_new_invariants_hold_at_every_step_of_random_workloads(case, specs):
    """Chunked, mixed, prefix-cached and retracted batches: init_new never changes the
    batch, and lengths, logit rows, logprob token ids and seeds match the spec."""
    config, workload = case
    reqs = []
    for j, (prompt, max_new, arrival) in enumerate(workload):
        kind, frac, seed = specs[j % len(specs)]
        lp = {} if kind == "none" else {"return_logprob": True, "logprob_start_len":
                                         -1 if kind == "output" else int(frac * len(prompt))}
        reqs.append(Req(f"r{j}", prompt, _params(max_new, sampling_seed=seed, **lp), arrival))
    prompts = {r.rid: list(r.origin_input_ids) for r in reqs}
    seeds = {r.rid: 42 if r.sampling_params.sampling_seed is None else r.sampling_params.sampling_seed
             for r in reqs}

    def on_step(batch, fb):
        _check_batch(batch, fb, prompts)
        assert fb.sampling_seeds.tolist() == [seeds[rid] for rid in fb.rids]

    fbs = _run(reqs, on_step=on_step, **config)
    assert fbs and any(fb.forward_mode.is_extend() for fb in fbs)
