"""Chunked admission keeps one chunked request per prefill and every prompt whole (issue 19
bug 1): page-rounded chunk budgets (SGLang's `ceil_paged_tokens` in `_update_prefill_budget`),
no second cut on the ignore_eos path, output counts from the output list."""

import numpy as np
import pytest

from shared import EngineConfig, ModelInfo, Req, SamplingParams, Scheduler, Workload
from shared.admission.prefill_adder import AddReqResult, PrefillAdder
from shared.memory.chunk_cache import ChunkCache
from shared.memory.kv_memory import KVMemory
from shared.workload.workload import WorkloadRequest
from tests.scripted_runner import ScriptedRunner, drive
from tests.test_decode_run import _assert_same_run, _simulate

MODEL = ModelInfo(vocab_size=50, eos_token_ids=(0,), context_length=8192)
# NOTE: a continued chunk (23 tokens) charged raw leaves 41 of 64; "d" is cut to 32, and the
# 9 left over were the ignore_eos request's second cut.
CONFIG = dict(page_size=16, disable_radix_cache=True, chunked_prefill_size=64,
              max_total_tokens=1024, disable_cuda_graph=True)
PROMPTS = {"a": ([1] * 39, False), "b": ([2] * 39, False), "d": ([4] * 39, False),
           "c": ([3] * 39, True)}


def _reqs():
    return [Req(rid, p, SamplingParams(max_new_tokens=6, ignore_eos=eos))
            for rid, (p, eos) in PROMPTS.items()]


def _run():
    sched = Scheduler(EngineConfig(**CONFIG), MODEL)
    drive(sched, ScriptedRunner(MODEL.vocab_size), _reqs())
    return sched


def test_no_prefill_holds_two_chunked_requests():
    """Each EXTEND step leaves at most one request's prompt short of the KV cache."""
    lens = {rid: len(p) for rid, (p, _) in PROMPTS.items()}
    for step in _run().trace.steps:
        cut = [rid for rid, seq in zip(step.rids, step.seq_lens, strict=True) if seq < lens[rid]]
        assert len(cut) <= 1, step


def test_a_first_sample_comes_after_the_whole_prompt_is_cached():
    """The first kept token of every request is sampled with its whole prompt in the KV cache."""
    sched = _run()
    first = {}
    for step in sched.trace.steps:
        for rid, seq, tok in zip(step.rids, step.seq_lens, step.next_token_ids, strict=True):
            if tok != -1:
                first.setdefault(rid, seq)
    assert first == {rid: len(p) for rid, (p, _) in PROMPTS.items()}


def test_output_counts_honour_max_new_tokens_after_a_cut_prompt():
    """Every request ends with exactly max_new_tokens outputs, finished by length."""
    sched = _run()
    for rid in PROMPTS:
        rec = sched.trace.requests[rid]
        assert rec.output_len == len(rec.output_ids) == 6, rid
        assert rec.finish_reason.type == "length"


def test_continued_chunks_are_charged_page_rounded():
    """add_chunked_req charges ceil_paged(extend) to the chunk budget, as add_one_req does."""
    mem = KVMemory.build(max_running_requests=4, max_context_len=512, max_total_tokens=1024,
                         page_size=16, disable_radix_cache=True)
    assert isinstance(mem.tree_cache, ChunkCache)
    adder = PrefillAdder(mem, [], 0.7, 16384, 64)
    req = Req("b", [2] * 23, SamplingParams(max_new_tokens=6))
    req.init_next_round_input(mem.tree_cache)
    assert adder.add_chunked_req(req) is None
    assert adder.rem_chunk_tokens == 64 - 32


def test_ignore_eos_admission_does_not_cut_beside_a_chunked_request():
    """With a request already cut this round, an ignore_eos request that does not fit whole
    waits (OTHER) instead of becoming a second chunked request."""
    mem = KVMemory.build(max_running_requests=4, max_context_len=512, max_total_tokens=1024,
                         page_size=1, disable_radix_cache=True)
    adder = PrefillAdder(mem, [], 0.7, 16384, 64)
    first, second = (Req(r, [5] * n, SamplingParams(max_new_tokens=6, ignore_eos=e))
                     for r, n, e in (("x", 50, False), ("y", 80, True)))
    for r in (first, second):
        r.init_next_round_input(mem.tree_cache)
    assert adder.add_one_req(first) == AddReqResult.CONTINUE
    adder.rem_chunk_tokens = 64  # NOTE: as if chunked_prefill_size were larger than the cut
    adder.new_chunked_req = first
    assert adder.add_one_req(second) == AddReqResult.OTHER
    assert adder.can_run_list == [first] and adder.new_chunked_req is first


@pytest.mark.parametrize("enable_mixed_chunk", [False, True])
def test_decode_runs_match_the_plain_loop_on_the_cut_prompt_workload(enable_mixed_chunk):
    """The simulator's decode-run fast path gives the step-by-step trace on this workload."""
    config = {**CONFIG, "enable_mixed_chunk": enable_mixed_chunk}
    workload = Workload(tuple(
        WorkloadRequest(rid, 0.0, tuple(p), SamplingParams(max_new_tokens=6, ignore_eos=eos))
        for rid, (p, eos) in PROMPTS.items()))
    a, _, _ = _simulate(config, workload, runs=False)
    b, _, _ = _simulate(config, workload, runs=True)
    _assert_same_run(a, b)
    for s in b.trace.steps:
        if s.forward_mode == "DECODE":  # only overlap rows are discarded in a decode
            assert tuple(np.flatnonzero(np.array(s.next_token_ids) == -1)) == s.overlap_rows


def _boundary_run(prompts: dict[str, int], chunk: int | None) -> Scheduler:
    """Four requests decoding at a page boundary (seq_len 16 of page 16) when `prompts`
    arrive; a KV pool of 15 usable pages."""
    sched = Scheduler(EngineConfig(page_size=16, max_total_tokens=256, enable_mixed_chunk=True,
                                   chunked_prefill_size=chunk, schedule_conservativeness=0.01,
                                   disable_cuda_graph=True), MODEL)
    reqs = [Req(f"r{i}", [1 + i] * 15, SamplingParams(max_new_tokens=30, ignore_eos=True))
            for i in range(4)]
    reqs += [Req(rid, [7] * n, SamplingParams(max_new_tokens=1, ignore_eos=True),
                 arrival_time=0.015) for rid, n in prompts.items()]
    drive(sched, ScriptedRunner(MODEL.vocab_size), reqs)
    assert all(sched.trace.requests[r.rid].output_len == r.sampling_params.max_new_tokens
               for r in reqs)
    sched.mem.check_idle()
    return sched


@pytest.mark.parametrize("chunk", [None, 64])
def test_a_mixed_step_at_a_page_boundary_finds_its_decode_pages(chunk):
    """Four decodes at a page boundary need four whole pages, not four tokens: a prefill
    that would leave them fewer waits, nothing raises, and no slot leaks (bug 3)."""
    _boundary_run({"big": 150}, chunk)


def test_a_prefill_that_leaves_the_decode_pages_free_still_mixes():
    """Reserving the decodes' pages does not turn mixing off: a 90-token prefill runs MIXED
    with the four decodes at the page boundary."""
    sched = _boundary_run({"mid": 90}, None)
    mixed = [s for s in sched.trace.steps if s.forward_mode == "MIXED"]
    assert mixed and mixed[0].rids[0] == "mid" and all(p % 16 == 0 for p in mixed[0].positions[-4:])


def test_an_aborted_chunked_request_leaves_the_next_chunked_request_chunked():
    """Overlap: "b" is aborted mid-prefill; when its chunk's result is processed, "c" is
    already the chunked request (scheduled since): c stays chunked and reads its own KV
    (shadow-KV invariant), instead of decoding a prompt it has not finished."""
    from shared import ForwardBatch
    from sim.conformance.shadow_kv import ShadowKV

    sched = Scheduler(EngineConfig(page_size=2, max_total_tokens=48, chunked_prefill_size=8,
                                   enable_mixed_chunk=True, disable_radix_cache=True,
                                   disable_cuda_graph=True), MODEL)
    shadow, runner = ShadowKV(sched.mem, sched.reqs), ScriptedRunner(MODEL.vocab_size)
    one = SamplingParams(max_new_tokens=1, ignore_eos=True)
    reqs = [Req(rid, [1] * n, one) for rid, n in (("a", 1), ("a2", 3), ("b", 5))]

    def build(batch):
        fb = ForwardBatch.init_new(batch)
        shadow.check(fb)
        return fb

    for r in reqs:
        sched.add_request(r)
    first = sched.get_next_batch_to_run(0.0)
    fb = build(first)
    sched.process_batch_result(first, runner.forward(fb), runner.sample(runner.forward(fb), fb), 0.01)
    assert sched.chunked_req is reqs[2] and sched.abort("b")
    drive(sched, runner, [Req("c", [2] * 3, one)], build=build)
    assert sched.trace.requests["c"].output_len == 1
    assert sched.trace.requests["b"].finish_reason.type == "abort"
    sched.mem.check_idle()


@pytest.mark.parametrize("overlap", [True, False])
def test_a_chunk_that_fits_its_own_partial_page_runs_instead_of_starving_a_decode(overlap):
    """Issue 41 defect 3: "b" (47 tokens) is chunked beside "a" decoding in a 76-token pool of
    page 4; its last token fits the partial page it already holds. That chunk needs no new
    page: it runs, and "a" is never aborted for memory while "b" holds KV it could give back."""
    sched = Scheduler(EngineConfig(page_size=4, max_total_tokens=76, chunked_prefill_size=16,
                                   schedule_conservativeness=0.05, enable_mixed_chunk=True,
                                   disable_overlap_schedule=not overlap, disable_cuda_graph=True),
                      MODEL)
    reqs = [Req("a", [1] * 15, SamplingParams(max_new_tokens=40, ignore_eos=True)),
            Req("b", [2] * 47, SamplingParams(max_new_tokens=3, ignore_eos=True),
                arrival_time=0.03)]
    drive(sched, ScriptedRunner(MODEL.vocab_size), reqs)
    for r in reqs:
        rec = sched.trace.requests[r.rid]
        want = ("length", r.sampling_params.max_new_tokens)
        assert (rec.finish_reason.type, rec.output_len) == want, (r.rid, rec.finish_reason)
    sched.mem.check_idle()


@pytest.mark.parametrize("overlap", [True, False])
def test_a_lone_request_whose_next_chunk_needs_the_last_free_page_is_not_stalled(overlap):
    """A 34-token prompt in a pool of four 12-token pages, chunks of 16: after 28 tokens its
    last 6 need the one free page. Reserving a page on top of the chunk held it back for
    ever with nothing else running (the scheduler stalled); charged its real page it runs."""
    sched = Scheduler(EngineConfig(page_size=12, max_total_tokens=48, chunked_prefill_size=16,
                                   disable_overlap_schedule=not overlap, disable_cuda_graph=True),
                      MODEL)
    drive(sched, ScriptedRunner(MODEL.vocab_size), [Req("a", [1] * 34, SamplingParams(max_new_tokens=1))])
    assert sched.trace.requests["a"].finish_reason.type == "length"
    extends = [s.seq_lens for s in sched.trace.steps if s.forward_mode == "EXTEND"]
    assert extends == [(12,), (28,), (34,)]
    sched.mem.check_idle()


@pytest.mark.parametrize("overlap", [True, False])
def test_a_chunked_request_with_no_room_is_retracted_before_the_last_decode_is_aborted(overlap):
    """Page size 1, a 40-token pool: "b" (32 tokens) is chunked beside "a" decoding, and a's
    growth leaves no slot for b's last token while a needs one too. Instead of aborting a
    (the last running request) while b holds 31 slots, b is retracted, a finishes, and b is
    prefilled again and finishes."""
    sched = Scheduler(EngineConfig(page_size=1, max_total_tokens=40, chunked_prefill_size=8,
                                   enable_mixed_chunk=True, schedule_conservativeness=0.01,
                                   disable_overlap_schedule=not overlap, disable_cuda_graph=True),
                      MODEL)
    reqs = [Req("a", [1], SamplingParams(max_new_tokens=10)),
            Req("b", [2] * 32, SamplingParams(max_new_tokens=1), arrival_time=0.03)]
    drive(sched, ScriptedRunner(MODEL.vocab_size), reqs)
    recs = sched.trace.requests
    ends = [(recs[r].finish_reason.type, recs[r].output_len) for r in "ab"]
    assert ends == [("length", 10), ("length", 1)], recs["a"].finish_reason
    assert recs["b"].num_retractions == 1
    sched.mem.check_idle()
