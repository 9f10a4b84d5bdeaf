"""Replaying a recorded run's tokens reproduces its schedule step for step.

Both runs use the same engine config and the same roofline clock; the recording draws seeded
tokens (EOS for one request) and ends two requests by hand (a stop string, an abort), as a
real run's stop strings and client aborts would. The replay sees the recorded ids through
ReplayTokenSource and the external finishes through its `finished` hook."""

import numpy as np

from shared import FinishReason, SamplingParams, Synthetic, Trace
from sim.model.from_config import embedded_configs
from sim.run.simulate import simulate
from sim.run.token_source import ReplayTokenSource, SyntheticTokenSource

EOS = 2
MODEL = {**embedded_configs()["smollm2-135m"], "eos_token_id": EOS}
ENGINE = {"max_total_tokens": 800, "chunked_prefill_size": 96, "enable_mixed_chunk": True,
          "schedule_conservativeness": 0.5}  # tight KV and eager admission: retractions
STOP = FinishReason.by_stop("END")
ABORT = FinishReason.by_abort("client went away")


ENDS = {"r1": (3, STOP), "r3": (2, ABORT)}   # rid -> (output tokens, how it ends)


class RecordedRun(SyntheticTokenSource):
    """Seeded ids, but r2 samples EOS at output 4; r1 ends by a stop string after 3 tokens
    and r3 is aborted after 2 (`steps_before_end` tells the driver's decode runs so)."""

    def token_ids(self, rids, indices):
        ids = super().token_ids(rids, indices)
        hit = (np.asarray(rids) == "r2") & (np.asarray(indices) == 4)
        return np.where(hit, EOS, ids)

    def steps_before_end(self, rids, output_lens, steps):
        for rid, have in zip(rids, np.asarray(output_lens).tolist(), strict=True):
            if rid in ENDS and ENDS[rid][0] > have:
                steps = min(steps, ENDS[rid][0] - have - 1)
        return steps

    def finished(self, batch, ids):
        return {r.rid: ENDS[r.rid][1] for r in batch.reqs
                if r.rid in ENDS and r.is_chunked == 0 and len(r.output_ids) + 1 == ENDS[r.rid][0]}


def _workload():
    return Synthetic(12, 150, 60, sampling_params=SamplingParams(ignore_eos=False)).build(
        vocab_size=MODEL["vocab_size"], seed=3, rate=400.0)


def _record(tmp_path):
    recorded = simulate(_workload(), model=MODEL, token_source=RecordedRun(0, MODEL["vocab_size"],
                                                                           (EOS,)), **ENGINE, keep_trace=True)
    path = tmp_path / "recorded.jsonl"
    recorded.trace.save(path)
    return Trace.load(path)


def test_replay_reproduces_every_step_record(tmp_path):
    """Replayed tokens give identical StepRecords (times ignored) and request outcomes,
    including the requests the recording ended early (EOS, stop string, abort)."""
    recorded = _record(tmp_path)
    reasons = {rid: r.finish_reason for rid, r in recorded.requests.items()}
    assert (reasons["r1"], reasons["r2"], reasons["r3"]) == (STOP, FinishReason.by_stop(EOS), ABORT)
    assert sum(r.num_retractions for r in recorded.requests.values()) > 0
    assert any(-1 in s.next_token_ids for s in recorded.steps)  # chunked prefills
    assert any(s.forward_mode == "MIXED" for s in recorded.steps)

    replayed = simulate(_workload(), model=MODEL, token_source=ReplayTokenSource(recorded),
                        **ENGINE, keep_trace=True).trace
    assert len(replayed.steps) == len(recorded.steps)
    for a, b in zip(recorded.steps, replayed.steps, strict=True):
        assert a.diff(b) is None
    for rid, rec in recorded.requests.items():
        got = replayed.requests[rid]
        assert (got.output_ids, got.finish_reason) == (rec.output_ids, rec.finish_reason)


def test_replay_under_a_different_config_diverges_from_the_recording(tmp_path):
    """The check above can fail: a replay with another chunk size schedules differently."""
    recorded = _record(tmp_path)
    replayed = simulate(_workload(), model=MODEL, token_source=ReplayTokenSource(recorded),
                        **{**ENGINE, "chunked_prefill_size": 64}, keep_trace=True).trace
    diffs = [a.diff(b) for a, b in zip(recorded.steps, replayed.steps, strict=False)]
    assert any(d is not None for d in diffs) or len(recorded.steps) != len(replayed.steps)

