"""The real executor under SGLang's overlap schedule: the forward of step N+1 runs on the
worker thread while step N's result is processed, and generation is unchanged."""

import threading

import pytest

from exec.engine.engine import Engine

PROMPTS = [[5, 6, 7, 8, 9], [5, 6, 7, 10], [100, 101], [7] * 12]


@pytest.fixture(scope="module")
def folder(tiny_checkpoint):
    return tiny_checkpoint("llama")[0]


def test_the_forward_runs_on_the_worker_while_the_last_result_is_processed(folder):
    """Each overlapped forward waits for the processing of the step before to start: it can
    only finish if the two run at the same time, the forward on the worker thread."""
    engine = Engine(folder, max_total_tokens=1024)
    sched, forward = engine.scheduler, engine.runner.forward
    started, threads = threading.Event(), []
    process_last = sched.process_last

    def processing(inflight):
        started.set()
        return process_last(inflight)

    def waiting_forward(fb):
        threads.append(threading.current_thread().name)
        if sched.pending is not None:  # NOTE: an overlapped step: the result is processed now
            assert started.wait(timeout=60), "the last result was not processed during the forward"
        started.clear()
        return forward(fb)

    sched.process_last, engine.runner.forward = processing, waiting_forward
    outs = engine.generate(PROMPTS, {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True})
    assert [len(o.token_ids) for o in outs] == [6] * 4
    assert any(name.startswith("batchtwin-forward") for name in threads)
    sched.mem.check_idle()


@pytest.mark.parametrize("params", [
    {"max_new_tokens": 12, "temperature": 0},
    {"max_new_tokens": 12, "temperature": 1.3, "sampling_seed": 7, "frequency_penalty": 0.5},
])
def test_both_schedules_generate_the_same_tokens(folder, params):
    """Greedy and seeded, penalised sampling give the same tokens with and without overlap
    (the sampler sees every earlier output under both)."""
    outs = [Engine(folder, max_total_tokens=1024, disable_overlap_schedule=flag).generate(PROMPTS, params)
            for flag in (True, False)]
    assert [o.token_ids for o in outs[0]] == [o.token_ids for o in outs[1]]
    assert [o.finish_reason for o in outs[0]] == [o.finish_reason for o in outs[1]]


def test_an_overlapped_forward_error_reaches_the_caller(folder):
    """An exception in the worker's forward reaches the caller as the abort message of the
    requests of that step (exec.runner.failing_steps: each half of the batch then runs, so they
    fail together); the engine serves on, leak-free."""
    engine = Engine(folder, max_total_tokens=1024)
    forward, calls = engine.runner.forward, []

    def failing(fb):
        calls.append(1)
        if len(calls) == 3:  # NOTE: the third forward runs beside the second's processing
            raise RuntimeError("boom in the forward")
        return forward(fb)

    engine.runner.forward = failing
    outs = engine.generate(PROMPTS, {"max_new_tokens": 6, "ignore_eos": True})
    assert all(o.finish_reason.type == "abort" and "boom in the forward" in o.finish_reason.message
               for o in outs)
    assert len(engine.generate(PROMPTS[0], {"max_new_tokens": 6, "ignore_eos": True}).token_ids) == 6
    engine.scheduler.mem.check_idle()
