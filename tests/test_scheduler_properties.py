"""Scheduler properties over random workloads (semantics §5–§8, §12), checked at every step.

Tokens come from a scripted runner (never EOS, `ignore_eos` set), so every request must end
with exactly `max_new_tokens` outputs, the scripted ones, also after retraction.
"""

import numpy as np
import pytest
from hypothesis import event, given, settings

from shared import SamplingParams
from shared.batch.schedule_batch import ScheduleBatch
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.scheduler import Scheduler
from shared.request.invalid_request import InvalidRequestError
from shared.request.req import Req
from shared.trace.trace import Trace
from sim.conformance.shadow_kv import ShadowKV
from tests.scripted_runner import ScriptedRunner, default_token, drive
from tests.strategies import kv_pressure_cases, scheduler_cases

MODEL = ModelInfo(vocab_size=64, eos_token_ids=(0,), context_length=256)


class CheckingRunner(ScriptedRunner):
    """Checks each ForwardBatch against the live KV tables before 'running' it."""

    def __init__(self, scheduler: Scheduler, reqs: list[Req]) -> None:
        super().__init__(MODEL.vocab_size)
        self.s = scheduler
        self.by_rid = {r.rid: r for r in reqs}
        self.shadow = ShadowKV(scheduler.mem, scheduler.reqs)

    def forward(self, fb):
        assert len(fb.input_ids) <= self.s.config.max_forward_tokens(), "wider than the static buffers"
        self.shadow.check(fb)
        self._check_positions_and_slots(fb)
        self._check_no_shared_writes(fb)
        if fb.forward_mode.is_extend():
            self._check_admission_budgets(fb)
        return super().forward(fb)

    def _check_positions_and_slots(self, fb):
        table, rows = fb.req_to_token, fb.req_pool_indices
        if fb.forward_mode.is_decode():
            assert np.array_equal(fb.positions, fb.seq_lens - 1)
            assert np.array_equal(fb.out_cache_loc, table[rows, fb.seq_lens - 1])
            return
        for i, (pre, ext, start) in enumerate(zip(fb.extend_prefix_lens, fb.extend_seq_lens,
                                                  fb.extend_start_loc, strict=True)):
            span = slice(start, start + ext)
            assert fb.positions[span].tolist() == list(range(pre, pre + ext)), "positions restart at the prefix"
            assert np.array_equal(fb.out_cache_loc[span], table[rows[i], pre : pre + ext])
            assert pre + ext == fb.seq_lens[i]

    def _check_no_shared_writes(self, fb):
        slots = fb.out_cache_loc
        assert len(np.unique(slots)) == len(slots), "a slot written twice in one step"
        assert 0 not in slots, "slot 0 is for padding only"
        written = set(slots.tolist())
        # NOTE: overlap: a request that finished after this step was scheduled freed the
        # slot of its (discarded) row already; nothing is allocated before the step runs.
        slots = slots[self._rows_of_live(fb)]
        for req, kv_len in self._live_requests():
            if req.rid in fb.rids or req.finished():
                continue
            row = fb.req_to_token[req.req_pool_idx, :kv_len]
            assert not written & set(row.tolist()), f"{req.rid}'s KV overwritten"
        assert not self.s.mem.allocator.is_free(slots).any()

    def _rows_of_live(self, fb) -> np.ndarray:
        """[T] bool: the tokens of rows whose request has not finished."""
        alive = np.array([not self.by_rid[r].finished() for r in fb.rids], dtype=bool)
        per_row = fb.extend_seq_lens if fb.forward_mode.is_extend() else np.ones(len(alive), np.int64)
        return np.repeat(alive, per_row)

    def _live_requests(self):
        """(request, KV length) of everything holding KV outside this batch."""
        running = self.s.running_batch
        live = list(zip(running.reqs, running.seq_lens.tolist(), strict=True)) if running else []
        chunked = self.s.chunked_req
        return live + ([(chunked, len(chunked.prefix_indices))] if chunked else [])

    def _check_admission_budgets(self, fb):
        cfg = self.s.config
        chunked = [r for r in fb.rids if self.by_rid[r].is_chunked > 0]
        assert len(chunked) <= 1, "at most one chunked request"
        decode_rows = sum(1 for r in fb.rids if self.by_rid[r] in self._decoding(fb))
        ext = fb.extend_seq_lens[: len(fb.rids) - decode_rows]
        ps = cfg.page_size
        if len(ext) > 1:
            assert int((-(-ext // ps) * ps).sum()) <= cfg.max_prefill_tokens, "prefill budget"
        if cfg.chunk_size is not None:
            assert int(ext.sum()) + decode_rows <= max(cfg.chunk_size, int(ext[:1].sum())), "chunk budget"
            if chunked:
                assert int(ext.sum()) + decode_rows <= cfg.chunk_size

    def _decoding(self, fb):
        batch = self.s.last_batch
        return batch.decoding_reqs if batch is not None else []


def _requests(reqs):
    return [Req(f"r{i}", prompt, SamplingParams(max_new_tokens=m, ignore_eos=True), arrival_time=t)
            for i, (prompt, m, t) in enumerate(reqs)]


def _run(case):
    config, reqs = case
    sched = Scheduler(EngineConfig(**config), MODEL)
    requests = _requests(reqs)
    drive(sched, CheckingRunner(sched, requests), requests)
    return sched


MORE = settings(max_examples=max(300, settings.default.max_examples))


@MORE
@given(case=scheduler_cases())
def test_every_step_honours_the_spec_and_every_request_finishes_whole(case):
    """Positions, slots, budgets and chunking hold at every step; each request ends with
    exactly its scripted tokens; the idle leak check passes."""
    sched = _run(case)
    for i, (_, max_new, _) in enumerate(case[1]):
        rec = sched.trace.requests[f"r{i}"]
        assert rec.output_ids == tuple(default_token(rec.rid, k, MODEL.vocab_size) for k in range(max_new))
        assert rec.finish_reason.type == "length"
    retractions = sum(r.num_retractions for r in sched.trace.requests.values())
    event(f"retractions: {'some' if retractions else 'none'}")
    event(f"modes: {sorted({s.forward_mode for s in sched.trace.steps})}")
    sched.mem.check_idle()


@given(case=scheduler_cases())
def test_guaranteed_no_evict_admission_never_retracts(case):
    """TensorRT-LLM's GUARANTEED_NO_EVICT: every running request's whole output is reserved
    at admission, so under any KV pressure no request is retracted, and all finish whole."""
    config, reqs = case
    sched = _run(({**config, "guaranteed_no_evict": True}, reqs))
    assert all(r.num_retractions == 0 for r in sched.trace.requests.values())
    assert all(r.finish_reason.type == "length" for r in sched.trace.requests.values())
    sched.mem.check_idle()


@given(case=scheduler_cases())
def test_same_workload_and_seed_give_identical_traces(case, tmp_path_factory):
    """Two runs agree step for step, and so does the trace after a save and load."""
    a, b = _run(case).trace, _run(case).trace
    assert len(a.steps) == len(b.steps)
    assert all(x.diff(y, ignore=()) is None for x, y in zip(a.steps, b.steps, strict=True))
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    a.save(path)
    loaded = Trace.load(path)
    assert loaded.steps == a.steps
    assert loaded.engine_config == a.engine_config
    assert loaded.requests.keys() == a.requests.keys()


@given(case=scheduler_cases())
def test_admission_reads_each_running_requests_remaining_tokens_from_the_arrays(case):
    """At every admission the batch arrays give each running request's max_new_tokens -
    len(output_ids) (the identity remaining_new_tokens relies on), under retraction,
    chunking and mixed steps."""
    checked = []
    remaining = ScheduleBatch.remaining_new_tokens

    def checking(batch):
        got = remaining(batch)
        assert got.tolist() == [r.sampling_params.max_new_tokens - len(r.output_ids) for r in batch.reqs]
        checked.append(len(batch))
        return got

    with pytest.MonkeyPatch.context() as m:
        m.setattr(ScheduleBatch, "remaining_new_tokens", checking)
        _run(case)
    event(f"admissions with running requests: {'some' if any(checked) else 'none'}")


@settings(max_examples=max(200, settings.default.max_examples))
@given(case=kv_pressure_cases())
def test_under_kv_pressure_only_a_request_that_exceeds_the_pool_alone_is_refused(case):
    """Liveness: a request whose prompt + max_new_tokens + page_size fits the KV pool alone
    finishes whole (by length), however the others press on the pool: never aborted for
    memory while a retraction or a held-back chunk could free it, no stall, no leak. One
    that does not fit is refused at submission, naming the pool."""
    config, reqs = case
    sched = Scheduler(EngineConfig(**config), MODEL)
    pool, ps = sched.config.max_total_tokens, sched.config.page_size
    accepted = []
    for i, (prompt, max_new, arrival, ignore_eos) in enumerate(reqs):
        req = Req(f"r{i}", prompt, SamplingParams(max_new_tokens=max_new, ignore_eos=ignore_eos),
                  arrival_time=arrival)
        if len(prompt) + max_new + ps < pool:
            accepted.append(req)  # NOTE: drive submits it, and fails if it is refused
            continue
        with pytest.raises(InvalidRequestError, match="does not fit the KV pool"):
            sched.add_request(req)
    drive(sched, CheckingRunner(sched, accepted), accepted)
    for req in accepted:
        rec = sched.trace.requests[req.rid]
        want = ("length", req.sampling_params.max_new_tokens)
        assert (rec.finish_reason.type, rec.output_len) == want, (req.rid, rec.finish_reason)
    retractions = sum(r.num_retractions for r in sched.trace.requests.values())
    event(f"retractions: {'some' if retractions else 'none'}")
    event(f"refused: {len(reqs) - len(accepted)}")
    sched.mem.check_idle()
