"""The fleet driver: replicas behind a router. One replica is the single engine, bit for bit;
N replicas serve every request once, each on its own KV cache."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import SamplingParams, Sessions, SharedPrefix, ShareGPTLike, Workload, WorkloadRequest
from sim.fleet.driver import Replica, drive_fleet
from sim.routers import ROUTERS, make_router
from sim.run.build import build_simulation, load_model, model_info
from sim.run.driver import drive_workload
from tests.strategies import generator_workloads, timing_engine_args

SMALL_MODEL = "smollm2-135m"   # a small model: short, cheap steps

CONFIGS = {
    "overlap": {},
    "no overlap": {"disable_overlap_schedule": True},
    "mixed chunk, small chunks": {"enable_mixed_chunk": True, "chunked_prefill_size": 256},
    "tight KV (retractions)": {"max_total_tokens": 6000, "disable_overlap_schedule": True},
}


def _workload(rate: float = 40.0, n: int = 120) -> Workload:
    return ShareGPTLike(n).build(vocab_size=128256, rate=rate, seed=3)


def _replica(model: str = "llama-3-8b", **engine_args) -> Replica:
    s = build_simulation(model=model, hardware="h100", seed=0, **engine_args)
    return Replica(s.scheduler, s.runner, s.token_source.finished)


def _trace_dicts(trace):
    return trace.header(), [s.to_dict() for s in trace.steps]


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("decode_runs", [True, False])
def test_one_replica_behind_any_router_is_the_single_engine_bit_for_bit(config, decode_runs):
    """Every router, every field of the trace: header, requests and each step's times."""
    w = _workload()
    single = _replica(**CONFIGS[config])
    expected = _trace_dicts(drive_workload(single.scheduler, single.runner, w,
                                           finished_hook=single.finished_hook,
                                           decode_runs=decode_runs))
    for name in ROUTERS:
        one = _replica(**CONFIGS[config])
        run = drive_fleet([one], w, make_router(name, 1), decode_runs=decode_runs)
        assert _trace_dicts(run.traces[0]) == expected, name
        assert set(run.replica_of.values()) == {0}


def _two_requests() -> Workload:
    params = SamplingParams(max_new_tokens=2, ignore_eos=True)
    return Workload((WorkloadRequest("a", 1 * 1e-3, (1, 2, 3), params),
                     WorkloadRequest("b", 10 * 1e-3, (4, 5, 6), params)))


def _conversations(seed: int, think_time: float) -> Workload:
    return Sessions(2, 3, user_len=16, output_len=4, think_time=think_time).build(vocab_size=49152,
                                                                                  seed=seed)


# NOTE: one timeout(t - now) lands a ulp past t from these sleeps (SimPy adds it to now):
# the single engine's from 0.523 s (idle) to c0-t1 at 2.662282963340886 s; the fleet's
# router's from 0.001 to "b" at 0.01; the fleet's follow-up process's from c0-t1's reply.
LATE_WAKE_CASES = {
    "single engine, to a follow-up": (lambda: _conversations(88, 1.0), "c0-t1"),
    "fleet, to the next request": (_two_requests, "b"),
    "fleet, to a follow-up": (lambda: _conversations(36, 0.3), "c0-t2"),
}


@pytest.mark.parametrize("case", list(LATE_WAKE_CASES))
def test_an_idle_engine_starts_a_request_exactly_at_its_arrival_alone_or_behind_any_router(case):
    """The sleep to an arrival lands on it: the request's first step starts at its arrival
    time, and one replica's trace is the single engine's, behind every router."""
    make, rid = LATE_WAKE_CASES[case]
    w = make()
    single = _replica(SMALL_MODEL, disable_overlap_schedule=True)
    expected = drive_workload(single.scheduler, single.runner, w,
                              finished_hook=single.finished_hook)
    fleets = {name: drive_fleet([_replica(SMALL_MODEL, disable_overlap_schedule=True)], w,
                                make_router(name, 1)).traces[0] for name in ROUTERS}
    for name, trace in {"single engine": expected, **fleets}.items():
        first = next(s for s in trace.steps if rid in s.rids)
        assert first.start_time == trace.requests[rid].arrival_time, name
        assert _trace_dicts(trace) == _trace_dicts(expected), name


@settings(max_examples=max(200, settings.default.max_examples))
@given(w=generator_workloads(model_info(*load_model(SMALL_MODEL))),
       router=st.sampled_from(sorted(ROUTERS)), engine_args=timing_engine_args,
       decode_runs=st.booleans())
def test_one_replica_behind_any_router_is_the_single_engine_for_every_workload_generator(
        w, router, engine_args, decode_runs):
    """Every StepRecord field (start_time and duration included) and every request record,
    whatever the arrival process; and in both, a step after an idle spell starts at an
    arrival time exactly (the engine sleeps to it: `sim.run.driver.wait_until`), however far
    back the single engine's or the fleet's sleep started."""
    single = _replica(SMALL_MODEL, **engine_args)
    expected = drive_workload(single.scheduler, single.runner, w,
                              finished_hook=single.finished_hook, decode_runs=decode_runs)
    one = _replica(SMALL_MODEL, **engine_args)
    got = drive_fleet([one], w, make_router(router, 1), decode_runs=decode_runs).traces[0]
    assert _starts_off_arrivals(expected) == _starts_off_arrivals(got) == []
    assert got.steps == expected.steps
    assert got.header() == expected.header()


def _starts_off_arrivals(trace) -> list[tuple[int, float]]:
    """(step, start) of each step that starts after an idle spell (not at the end of the
    step before it) at a time when no request arrived."""
    arrivals = {r.arrival_time for r in trace.requests.values()}
    ends = [0.0] + [s.start_time + s.duration for s in trace.steps]
    return [(s.step, s.start_time) for s, end in zip(trace.steps, ends, strict=False)
            if s.start_time != end and s.start_time not in arrivals]


@pytest.mark.parametrize("router", list(ROUTERS))
def test_a_fleet_serves_every_request_once_on_its_routed_replica(router):
    """Three replicas: each request is in exactly the trace of the replica it was sent to,
    finished, and every replica ends idle (the idle check finds no leaked KV)."""
    w = _workload(rate=60.0)
    replicas = [_replica() for _ in range(3)]
    run = drive_fleet(replicas, w, make_router(router, 3, seed=1))
    assert sorted(run.replica_of) == sorted(r.rid for r in w)
    for i, trace in enumerate(run.traces):
        mine = {rid for rid, rep in run.replica_of.items() if rep == i}
        assert set(trace.requests) == mine
        assert all(rec.finish_reason is not None for rec in trace.requests.values())
    for r in replicas:
        assert r.scheduler.is_idle()


def test_round_robin_spreads_requests_evenly_over_the_replicas():
    """120 requests over 4 replicas: 30 each, in turn by arrival."""
    w = _workload()
    run = drive_fleet([_replica() for _ in range(4)], w, make_router("round_robin", 4))
    assert [run.replica_of[r.rid] for r in w][:8] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert sorted(list(run.replica_of.values()).count(i) for i in range(4)) == [30] * 4


def test_the_same_seed_gives_the_same_fleet_run():
    """random and power_of_two draw from their seeded generators only."""
    w = _workload()
    runs = [drive_fleet([_replica() for _ in range(3)], w, make_router(name, 3, seed=7))
            for name in ("random", "random", "power_of_two", "power_of_two")]
    assert runs[0].replica_of == runs[1].replica_of
    assert runs[2].replica_of == runs[3].replica_of
    assert [_trace_dicts(t) for t in runs[2].traces] == [_trace_dicts(t) for t in runs[3].traces]


def _schedulers_tracked() -> int:
    from shared.loop.scheduler import Scheduler

    return sum(type(o) is Scheduler for o in gc.get_objects())


@pytest.mark.parametrize("router, turns", [("least_load", 1), ("round_robin", 2)])
def test_a_fleet_run_leaves_no_scheduler_to_the_cyclic_collector(router, turns):
    """A run pauses the collector and hands what it made to the oldest generation
    (sim.run.driver.cyclic_gc_paused), so a replica held in a reference cycle would outlive the
    run until a rare full collection: its KV pool (tens of MB) too, at every fleet run of a
    sweep. Both ways of routing at arrival: a router that reads the loads, and follow-up
    turns behind any router."""
    from sim.fleet.fleet_layout import Fleet
    from sim.run.simulate import simulate

    w = Sessions(3, turns, user_len=8, output_len=4).build(vocab_size=49152, rate=100.0, seed=1)
    gc.collect()
    gc.disable()
    try:
        before = _schedulers_tracked()
        simulate(w, layout=Fleet(2, router), model=SMALL_MODEL, bounds=False, keep_trace=True)
        assert _schedulers_tracked() == before
    finally:
        gc.enable()


class _Stray:
    name, reads_load = "stray", False

    def route(self, request, fleet):
        return fleet.num_replicas


def test_a_router_index_outside_the_fleet_is_refused_naming_it():
    with pytest.raises(RuntimeError, match="router 'stray' sent request 'r0' to replica 2"):
        drive_fleet([_replica(), _replica()], _workload(), _Stray())


def test_an_empty_fleet_and_an_unknown_router_are_refused():
    with pytest.raises(ValueError, match="at least one replica"):
        drive_fleet([], _workload(), make_router(None, 1))
    with pytest.raises(ValueError, match=r"unknown router 'nearest'.*round_robin"):
        make_router("nearest", 2)


def test_cache_aware_beats_round_robin_on_shared_prefix_traffic():
    """16 system prompts of 1024 tokens, 32 questions each, on 4 replicas: keeping a group
    on one replica raises the prefix hit rate and cuts the TTFT tail."""
    from sim.fleet.fleet_layout import Fleet
    from sim.run.simulate import simulate

    w = SharedPrefix(16, 32, 1024, 64, 64).build(vocab_size=128256, rate=40.0, seed=2)
    rr, ca = (simulate(w, layout=Fleet(4, r), bounds=False, keep_trace=True).summary
              for r in ("round_robin", "cache_aware"))
    assert ca["prefix_hit_rate"] > rr["prefix_hit_rate"] + 0.05
    assert ca["ttft_p90"] < 0.7 * rr["ttft_p90"]


def test_cache_aware_matches_least_load_without_shared_prefixes():
    """ShareGPT-like prompts share nothing: over three seeds the medians of TTFT p50, E2E
    p50 and output throughput agree within the seed-to-seed noise (5%, 3%, 1%)."""
    import statistics

    from sim.fleet.fleet_layout import Fleet
    from sim.run.simulate import simulate

    runs = {r: [simulate(ShareGPTLike(400).build(vocab_size=128256, rate=40.0, seed=seed),
                         layout=Fleet(4, r), bounds=False, keep_trace=True).summary for seed in range(3)]
            for r in ("least_load", "cache_aware")}
    for metric, tolerance in (("ttft_p50", 0.05), ("e2e_p50", 0.03), ("output_throughput", 0.01)):
        ll, ca = (statistics.median(s[metric] for s in runs[r]) for r in runs)
        assert ca == pytest.approx(ll, rel=tolerance), metric
    assert all(s["prefix_hit_rate"] < 0.01 for r in runs for s in runs[r])


class _CheckingLoads:
    """A router that, at every decision, compares each replica's load as the fleet shows it
    (kept between its scheduler's changes: `sim.fleet.replica_loop`) with the load its
    scheduler reports now, then routes as `inner`."""

    reads_load = True

    def __init__(self, inner) -> None:
        self.inner, self.name, self.checked = inner, inner.name, 0

    def route(self, request, fleet):
        for i in range(fleet.num_replicas):
            assert fleet.loops[i].load() == fleet.schedulers[i].load(), (request.rid, i)
            self.checked += 1
        return self.inner.route(request, fleet)


def _replies_at_once() -> Workload:
    """Conversations whose next turn arrives the instant the reply ends: without overlap, the
    replica that finished it reaches its scheduling point then and routes the turn itself,
    midway through its own turn (`Inbox.due`)."""
    return Sessions(16, 4, user_len=64, output_len=16, think_time=0.0).build(vocab_size=49152,
                                                                             rate=400.0, seed=1)


LOAD_CASES = {**{f"sharegpt, {c}": (lambda: _workload(rate=80.0), "llama-3-8b", CONFIGS[c])
                 for c in CONFIGS},
              "replies routed by the replica": (_replies_at_once, SMALL_MODEL,
                                                CONFIGS["no overlap"])}


@pytest.mark.parametrize("case", list(LOAD_CASES))
@pytest.mark.parametrize("router", ["least_load", "cache_aware", "power_of_two"])
def test_the_load_a_router_reads_is_the_replicas_scheduler_load_at_that_instant(case, router):
    """Three busy replicas: whenever the router decides (at the arrival, or on demand at a
    replica's scheduling point), every replica's load is what its scheduler reports at that
    instant, and the run is the one the plain router gives."""
    make, model, engine = LOAD_CASES[case]
    w = make()
    checking = _CheckingLoads(make_router(router, 3, seed=1))
    run = drive_fleet([_replica(model, **engine) for _ in range(3)], w, checking)
    plain = drive_fleet([_replica(model, **engine) for _ in range(3)], w,
                        make_router(router, 3, seed=1))
    assert checking.checked == 3 * len(run.replica_of)
    assert run.replica_of == plain.replica_of
    assert [_trace_dicts(t) for t in run.traces] == [_trace_dicts(t) for t in plain.traces]


def test_a_request_one_replica_of_a_mixed_fleet_cannot_serve_is_refused_before_the_run():
    """The workload is checked once per distinct replica: a replica with a shorter context
    behind two equal ones still refuses the long prompt, naming it."""
    from shared.request.invalid_request import InvalidRequestError

    params = SamplingParams(max_new_tokens=8)
    w = Workload((WorkloadRequest("short", 0.0, (1, 2, 3), params),
                  WorkloadRequest("long", 0.01, tuple(range(1, 301)), params)))
    fleet = [_replica(SMALL_MODEL), _replica(SMALL_MODEL), _replica(SMALL_MODEL, context_length=256)]
    with pytest.raises(InvalidRequestError, match="request 'long'"):
        drive_fleet(fleet, w, make_router("round_robin", 3))
