"""Both online engines (`shared.online.online_engine`), driven directly as a server drives them: a
request the scheduler refuses on the engine's thread ends aborted with the reason, and the
engine goes on serving the others; a failing engine thread ends every open request. Their
behaviour under calls from several threads at once: tests/test_online_engine_races.py."""

from __future__ import annotations

import pytest

from shared.online.online_engine import EngineUnavailable
from shared.request.sampling_params import SamplingParams
from tests.online_engines import Collected, exec_engine, sim_engine


@pytest.mark.parametrize("kind", ["sim", "exec"])
def test_a_taken_rid_is_aborted_with_its_reason_and_the_engine_serves_on(kind, tiny_checkpoint):
    """A second request under a rid still running ends aborted naming the rid; the first,
    and one submitted after, complete with all their tokens."""
    if kind == "exec":
        pytest.importorskip("torch")
    engine = sim_engine() if kind == "sim" else exec_engine(tiny_checkpoint)
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    first, twin, later = Collected(), Collected(), Collected()
    engine.start()
    try:
        engine.submit("a", [5, 6, 7], params, first)
        engine.submit("a", [5, 6, 8], params, twin)
        assert twin.done.wait(30) and first.done.wait(30)
        engine.submit("b", [9, 10], params, later)
        assert later.done.wait(30)
    finally:
        engine.stop()
    assert twin.events[-1].finish.type == "abort" and "rid" in twin.events[-1].finish.message
    for c in (first, later):
        assert sum(len(e.token_ids) for e in c.events) == 6 and c.events[-1].finish.type == "length"


@pytest.mark.parametrize("kind", ["sim", "exec"])
def test_a_failing_engine_thread_ends_open_requests_and_stop_raises(kind, tiny_checkpoint):
    """When the engine's step raises, every open request ends aborted naming the error, later
    submits are refused (EngineUnavailable), and stop() raises it."""
    if kind == "exec":
        pytest.importorskip("torch")
    engine = sim_engine() if kind == "sim" else exec_engine(tiny_checkpoint)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    # NOTE: code that runs only once a batch does (the runner's own errors are isolated per request)
    target = engine._stepper if kind == "sim" else engine._stepper._e.logprobs
    setattr(target, "_run" if kind == "sim" else "collect", broken)
    open_request = Collected()
    engine.start()
    engine.submit("a", [5, 6, 7], SamplingParams(max_new_tokens=4, ignore_eos=True), open_request)
    assert open_request.done.wait(30)
    assert open_request.events[-1].finish.type == "abort" and "boom" in open_request.events[-1].finish.message
    with pytest.raises(EngineUnavailable, match="failed"):
        engine.submit("b", [5], SamplingParams(max_new_tokens=2), Collected())
    with pytest.raises(RuntimeError, match="boom"):
        engine.stop()


def test_the_arrival_buffer_hands_over_what_arrived_and_ends_what_is_taken():
    """take_until(t) returns the requests that arrived by t in order and keeps the later
    ones; take(rid) removes one request, take() the rest."""
    from shared.online.arrival_buffer import ArrivalBuffer

    buf = ArrivalBuffer(lambda a: a[1], lambda a: a[0])
    for item in (("a", 0.1), ("b", 0.5), ("c", 0.2), ("d", 0.9)):
        buf.add(item)
    assert buf.take_until(0.3) == [("a", 0.1), ("c", 0.2)]
    assert buf.take("a") == [] and buf.take("d") == [("d", 0.9)]
    assert buf.take() == [("b", 0.5)] and not buf
