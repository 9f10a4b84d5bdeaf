"""Both online engines under submits, aborts and stops from several threads at once (the
server's threads): every request is refused (EngineUnavailable, nothing sent) or gets exactly
one last event, and abort knows a request wherever it waits (`shared.online.engine_inbox`)."""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time

import pytest
from hypothesis import given, settings

from shared.online.online_engine import EngineUnavailable
from shared.request.invalid_request import InvalidRequestError
from shared.request.sampling_params import SamplingParams
from tests.online_engines import HANG_S, Collected, exec_engine, sim_engine
from tests.strategies import engine_call_plans


def _engine(kind, tiny_checkpoint):
    if kind == "exec":
        pytest.importorskip("torch")
    return sim_engine() if kind == "sim" else exec_engine(tiny_checkpoint)


@pytest.mark.parametrize("kind", ["sim", "exec"])
def test_a_stop_between_a_submits_validation_and_its_post_refuses_the_submit(kind, tiny_checkpoint,
                                                                            monkeypatch):
    """stop() run to its end while a submit is past its validation: the submit raises
    EngineUnavailable and nothing is sent (before the fix it returned, and the request
    was never answered)."""
    engine = _engine(kind, tiny_checkpoint)
    check = engine._stepper.check   # NOTE: what submit validates with

    def check_then_stop(*args):
        check(*args)
        engine.stop()

    monkeypatch.setattr(engine._stepper, "check", check_then_stop)
    got = Collected()
    engine.start()
    with pytest.raises(EngineUnavailable, match="shutting down"):
        engine.submit("a", [5, 6, 7], SamplingParams(max_new_tokens=2), got)
    assert got.events == []


@pytest.mark.parametrize("kind", ["sim", "exec"])
def test_a_request_posted_after_the_engines_drain_and_before_stop_is_answered(kind, tiny_checkpoint,
                                                                             monkeypatch):
    """A submit that returns after the engine's thread took its inbox, and then stop(): the
    request still gets its one last event (aborted by the shutdown) by the time stop()
    returns (before the fix the loop read `stopping` after its drain and ended without it)."""
    engine = _engine(kind, tiny_checkpoint)
    drain, drained = engine._drain_inbox, threading.Event()

    def drain_then_wait_for_stop():   # NOTE: on the engine's thread, its first turn only
        drain()
        if not drained.is_set():
            drained.set()
            deadline = time.monotonic() + HANG_S
            while not engine._loop.stopping and time.monotonic() < deadline:
                time.sleep(0.001)

    monkeypatch.setattr(engine, "_drain_inbox", drain_then_wait_for_stop)
    got = Collected()
    engine.start()
    assert drained.wait(HANG_S)
    engine.submit("a", [5, 6, 7], SamplingParams(max_new_tokens=2), got)
    engine.stop()
    assert [e.finish.type for e in got.events if e.finish is not None] == ["abort"], got.events


@pytest.mark.parametrize("kind", ["sim", "exec"])
def test_aborting_a_request_still_in_the_inbox_answers_true_and_ends_it_aborted(kind, tiny_checkpoint):
    """While the engine's thread is busy (held in another request's event), a request just
    submitted waits in the inbox: abort answers True and it ends with one abort event;
    aborting it again, or an unknown rid, answers False."""
    engine = _engine(kind, tiny_checkpoint)
    entered, release, waiting = threading.Event(), threading.Event(), Collected()

    def hold(event):   # NOTE: the engine's thread waits here, so nothing leaves the inbox
        entered.set()
        release.wait(HANG_S)

    engine.start()
    try:
        engine.submit("a", [5, 6, 7], SamplingParams(max_new_tokens=2, ignore_eos=True), hold)
        assert entered.wait(HANG_S)
        engine.submit("b", [8, 9], SamplingParams(max_new_tokens=4, ignore_eos=True), waiting)
        known = engine.abort("b")
        release.set()
        assert waiting.done.wait(HANG_S)
        again, unknown = engine.abort("b"), engine.abort("nobody")
    finally:
        release.set()
        engine.stop()
    assert known, "abort('b') answered False for a request in the inbox"
    assert [e.finish.type for e in waiting.events] == ["abort"] and not again and not unknown


class Submission:
    """One submit call of a plan: its rid and max_new_tokens, the events it got and, if
    refused, the exception."""

    def __init__(self, rid: str, max_new_tokens: int) -> None:
        self.rid, self.max_new_tokens, self.got, self.refused = rid, max_new_tokens, Collected(), None


def _run_plan(engine, plan: list[list[tuple]],
              prefix: str = "") -> tuple[list[Submission], list[tuple[str, bool]]]:
    """Start the engine, run each thread's calls (the threads released together, each rid
    taken as prefix + rid), stop it."""
    submissions, aborts, errors = [], [], []
    barrier = threading.Barrier(len(plan))

    def call(c: tuple) -> None:
        if c[0] == "stop":
            engine.stop()
        elif c[0] == "abort":
            aborts.append((c[1], engine.abort(prefix + c[1])))
        else:
            s = Submission(c[1], c[3])
            submissions.append(s)
            try:
                params = SamplingParams(max_new_tokens=c[3], ignore_eos=True)
                engine.submit(prefix + c[1], c[2], params, s.got)
            except (EngineUnavailable, InvalidRequestError) as e:
                s.refused = e

    def worker(calls: list[tuple]) -> None:
        try:
            barrier.wait(HANG_S)
            for c in calls:
                call(c)
        except BaseException as e:   # NOTE: the test thread reports it
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(calls,), daemon=True) for calls in plan]
    engine.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
        assert not t.is_alive(), "a call hung"
    engine.stop()   # NOTE: joined: every event the engine sends was sent by now
    assert not errors, errors
    return submissions, aborts


@contextlib.contextmanager
def fine_thread_switches():
    """NOTE: CPython hands the GIL over every 5 ms, so threads whose calls do not block run
    them one after another; handed over every microsecond, the calls interleave finely and
    the races between them show."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _check_every_request_is_refused_or_ends_once(plan, submissions, aborts) -> None:
    stops = any(c[0] == "stop" for calls in plan for c in calls)
    for s in submissions:
        events = s.got.events
        if s.refused is not None:
            assert events == [], f"{s.rid} was refused ({s.refused!r}) yet got events"
            assert stops or isinstance(s.refused, InvalidRequestError), s.refused
            continue
        ends = [e for e in events if e.finish is not None]
        assert len(ends) == 1 and events[-1] is ends[0], f"{s.rid} accepted, got {len(ends)} last events"
        if ends[0].finish.type == "length":
            assert sum(len(e.token_ids) for e in events) == s.max_new_tokens
    accepted = {s.rid for s in submissions if s.refused is None}
    assert all(rid in accepted for rid, known in aborts if known), "abort knew a request never accepted"


@settings(max_examples=max(200, settings.default.max_examples))
@given(plan=engine_call_plans())
def test_concurrent_submits_aborts_and_stops_refuse_or_end_every_request_once_simulated(plan):
    """Threads released together submit, abort and stop: every submit raises (nothing sent)
    or its request gets exactly one last event by the time stop() returns; EngineUnavailable
    only where some thread stopped the engine; abort answers True only for an accepted rid."""
    with fine_thread_switches():
        submissions, aborts = _run_plan(sim_engine(), plan)
    _check_every_request_is_refused_or_ends_once(plan, submissions, aborts)


@pytest.fixture(scope="module")
def fresh_exec_online_engines(tiny_checkpoint):
    """`make()` -> (a new ServingLoop over an ExecStepper, the rid prefix its requests take): all over one
    tiny Engine, built once (its weight packing is what a build costs); stop() leaves it idle
    with its idle check passed, and the prefix keeps rids new (an Engine takes each once)."""
    pytest.importorskip("torch")
    from exec.engine.engine import Engine
    from exec.engine.online_engine import ExecStepper
    from shared.online.serving_loop import ServingLoop

    engine, runs = Engine(tiny_checkpoint("llama")[0], max_total_tokens=1024), itertools.count()
    return lambda: (ServingLoop(ExecStepper(engine, "m")), f"run{next(runs)}-")


@settings(max_examples=max(200, settings.default.max_examples))
@given(plan=engine_call_plans())
def test_concurrent_submits_aborts_and_stops_refuse_or_end_every_request_once_real(
        fresh_exec_online_engines, plan):
    """The same as `..._simulated`, with the real engine (a tiny model)."""
    engine, prefix = fresh_exec_online_engines()
    with fine_thread_switches():
        submissions, aborts = _run_plan(engine, plan, prefix)
    _check_every_request_is_refused_or_ends_once(plan, submissions, aborts)
