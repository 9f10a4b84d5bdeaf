"""ARCHITECTURE.md §4's worked example, field by field, through the real Scheduler, under both
schedules: the example is the one without overlap (`disable_overlap_schedule=True`); under
SGLang's default overlap schedule the same requests run the same EXTEND and DECODE batches,
plus one discarded DECODE row wherever a request finished in the step before."""

import dataclasses

from shared import SamplingParams
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.scheduler import Scheduler
from shared.request.req import Req
from tests.scripted_runner import ScriptedRunner, drive

MODEL = ModelInfo(vocab_size=100, eos_token_ids=(0,), context_length=64)
CONFIG = EngineConfig(max_total_tokens=256, chunked_prefill_size=None, disable_cuda_graph=True,
                      disable_overlap_schedule=True)


def _run_golden(config: EngineConfig = CONFIG):
    sched = Scheduler(config, MODEL)
    runner = ScriptedRunner(MODEL.vocab_size)
    warm = Req("warm", [21, 22, 23], SamplingParams(max_new_tokens=1))
    two = SamplingParams(max_new_tokens=2, ignore_eos=True)
    a = Req("a", [11, 12, 13, 14, 15, 16], two, arrival_time=1.0)
    b = Req("b", [21, 22, 23, 24, 25, 26], two, arrival_time=1.0)
    drive(sched, runner, [warm, a, b])
    return sched


def test_golden_extend_step_matches_the_design_example():
    """The EXTEND step of a and b equals ARCHITECTURE.md §4 in every listed field."""
    steps = _run_golden().trace.steps
    assert [s.forward_mode for s in steps] == ["EXTEND", "EXTEND", "DECODE"]
    ext = steps[1]
    assert ext.rids == ("a", "b")
    assert ext.input_ids == (11, 12, 13, 14, 15, 16, 24, 25, 26)
    assert ext.positions == (0, 1, 2, 3, 4, 5, 3, 4, 5)
    assert ext.extend_prefix_lens == (0, 3)
    assert ext.extend_seq_lens == (6, 3)
    assert ext.seq_lens == (6, 6)
    assert ext.extend_start_loc == (0, 6)
    assert ext.pruned_rows == (5, 8)
    assert ext.sample_indices == (0, 1)


def test_golden_decode_step_feeds_the_extend_tokens():
    """The next DECODE feeds both sampled tokens at positions [6, 6] with seq_lens [7, 7]."""
    sched = _run_golden()
    ext, dec = sched.trace.steps[1], sched.trace.steps[2]
    assert dec.input_ids == ext.next_token_ids
    assert dec.positions == (6, 6)
    assert dec.seq_lens == (7, 7)
    assert dec.pruned_rows == (0, 1)
    assert dec.extend_seq_lens == ()
    assert {r.output_len for r in sched.trace.requests.values()} == {1, 2}


def test_golden_example_under_overlap_adds_one_discarded_row_after_each_finish():
    """Overlap: "warm" (one token, finished by its prefill) still decodes once, its row
    discarded (-1, overlap_rows) and its slot freed; a and b run ARCHITECTURE §4's EXTEND and
    DECODE unchanged (in other KV slots: the freed one went to the back of the free list),
    then one more DECODE whose rows are discarded; every token and finish time is the one
    without overlap, and nothing leaks."""
    plain, overlap = _run_golden(), _run_golden(dataclasses.replace(CONFIG, disable_overlap_schedule=False))
    steps = overlap.trace.steps
    assert [(s.forward_mode, s.rids) for s in steps] == [
        ("EXTEND", ("warm",)), ("DECODE", ("warm",)), ("EXTEND", ("a", "b")),
        ("DECODE", ("a", "b")), ("DECODE", ("a", "b"))]
    assert (steps[1].next_token_ids, steps[1].overlap_rows) == ((-1,), (0,))
    assert (steps[4].next_token_ids, steps[4].overlap_rows) == ((-1, -1), (0, 1))
    for kept, ref in ((steps[2], plain.trace.steps[1]), (steps[3], plain.trace.steps[2])):
        assert kept.diff(ref, ignore=("step", "start_time", "duration", "out_cache_loc",
                                       "kv_used_tokens")) is None
    assert steps[4].positions == (7, 7) and steps[4].input_ids == steps[3].next_token_ids
    assert {r: (x.output_ids, x.finish_time) for r, x in overlap.trace.requests.items()} == \
        {r: (x.output_ids, x.finish_time) for r, x in plain.trace.requests.items()}
    overlap.mem.check_idle()


def test_padded_decode_rows_read_one_token_and_write_slot_zero():
    """Padding a decode batch to a captured size adds rows with seq_len 1 and slot 0."""
    from shared import ForwardBatch, pad_decode_batch

    sched = Scheduler(CONFIG, MODEL)
    runner = ScriptedRunner(MODEL.vocab_size)
    for rid in ("a", "b", "c"):
        sched.add_request(Req(rid, [1, 2, 3], SamplingParams(max_new_tokens=3, ignore_eos=True)))
    batch = sched.get_next_batch_to_run(0.0)
    fb = ForwardBatch.init_new(batch)
    out = runner.forward(fb)
    sched.process_batch_result(batch, out, runner.sample(out, fb), 0.1)
    fb = ForwardBatch.init_new(sched.get_next_batch_to_run(0.1))
    padded = pad_decode_batch(fb, 4)
    assert padded.seq_lens.tolist() == [*fb.seq_lens.tolist(), 1]
    assert padded.out_cache_loc.tolist() == [*fb.out_cache_loc.tolist(), 0]
    assert 0 not in fb.out_cache_loc
