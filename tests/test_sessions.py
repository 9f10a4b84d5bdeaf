"""Closed-loop conversations: each turn is sent a think time after the previous reply and
re-sends the history, on one engine and behind a router."""

from __future__ import annotations

import pytest

from shared import Sessions, Workload
from sim.fleet.driver import Replica, drive_fleet
from sim.fleet.fleet_layout import Fleet
from sim.routers import ROUTERS, make_router
from sim.run.build import build_simulation
from sim.run.driver import drive_workload
from sim.run.simulate import simulate


def _sessions(n: int = 12, turns: int = 4, **kwargs) -> Workload:
    return Sessions(n, turns, user_len=64, output_len=48, think_time=0.2, **kwargs).build(
        vocab_size=128256, rate=4.0, seed=3)


def _replica(**engine_args) -> Replica:
    s = build_simulation(model="llama-3-8b", hardware="h100", seed=0, **engine_args)
    return Replica(s.scheduler, s.runner, s.token_source.finished)


def _run(w: Workload, decode_runs: bool = True, **engine_args):
    r = _replica(**engine_args)
    return drive_workload(r.scheduler, r.runner, w, finished_hook=r.finished_hook,
                          decode_runs=decode_runs)


def _dicts(trace):
    return trace.header(), [s.to_dict() for s in trace.steps]


def test_a_turn_arrives_its_think_time_after_the_reply_with_the_history():
    """Arrival = the previous turn's finish + think time; prompt = its prompt + its reply +
    the new user message; every turn is served."""
    w = _sessions()
    trace = _run(w)
    records = trace.requests
    assert len(records) == len(w) == 48
    for f in w.followups:
        before, turn = records[f.after], records[f.rid]
        assert turn.arrival_time == before.finish_time + f.think_time
        assert turn.input_ids == before.input_ids + before.output_ids + f.user_ids
        assert turn.finish_reason is not None


@pytest.mark.parametrize("overlap", [True, False])
def test_decode_runs_give_the_step_by_step_trace_for_conversations(overlap):
    w = _sessions()
    args = {"disable_overlap_schedule": not overlap}
    assert _dicts(_run(w, True, **args)) == _dicts(_run(w, False, **args))


def test_one_replica_behind_any_router_serves_conversations_as_one_engine():
    w = _sessions()
    expected = _dicts(_run(w))
    for name in ROUTERS:
        run = drive_fleet([_replica()], w, make_router(name, 1))
        assert _dicts(run.traces[0]) == expected, name


def test_cache_aware_keeps_a_conversation_where_its_history_is_cached():
    """Turns re-send their history: cache_aware follows it, round_robin scatters it."""
    w = _sessions(n=24, turns=5)
    rr, ca = (simulate(w, layout=Fleet(4, r), bounds=False, keep_trace=True).summary
              for r in ("round_robin", "cache_aware"))
    assert ca["prefix_hit_rate"] > rr["prefix_hit_rate"] + 0.2


def test_a_turn_past_the_context_ends_its_conversation_and_the_rest_run():
    """A 300-token context: later turns of every conversation would overflow it; they are
    not sent, and every turn that was sent finishes."""
    w = _sessions(n=4, turns=6)
    trace = _run(w, context_length=300, max_total_tokens=20000)
    sent = set(trace.requests)
    assert {r.rid for r in w.requests} <= sent and len(sent) < len(w)
    assert all(rec.finish_reason is not None for rec in trace.requests.values())
    for f in w.followups:
        if f.rid in sent:
            assert f.after in sent


def test_conversations_round_trip_through_a_workload_file(tmp_path):
    w = _sessions()
    w.to_jsonl(tmp_path / "w.jsonl")
    assert Workload.from_jsonl(tmp_path / "w.jsonl") == w


def test_a_follow_up_must_answer_a_request_of_the_workload():
    w = _sessions(n=1, turns=2)
    bad = w.followups[0].__class__("x", "nobody", 1.0, (1,), w.followups[0].sampling_params)
    with pytest.raises(ValueError, match="answers 'nobody'"):
        Workload(w.requests, "w", {}, (bad,))
