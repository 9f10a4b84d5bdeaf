"""Fuzzed requests never poison an engine: random sampling-params dicts (any JSON-like
values, wrong types included), random prompts and random aborts, thrown at the real Engine on
a tiny model and at `sim.run.simulate`.

Each example checks: a refused request raises `InvalidRequestError` (and nothing is queued);
an accepted one finishes; nothing else raises; the greedy requests that were not aborted get
the tokens they get alone; the engine is idle and leak-free afterwards.
"""

import pytest
from hypothesis import HealthCheck, event, given, settings

from exec.engine.engine import Engine
from shared import InvalidRequestError, SamplingParams
from shared.workload.workload import Workload, WorkloadRequest
from sim.run.simulate import simulate
from tests.engine_checks import assert_idle_and_leak_free
from tests.strategies import fuzz_requests
from tests.tiny_models import COMMON

VOCAB = COMMON["vocab_size"]
SIM_MODEL, SIM_VOCAB = "smollm2-135m", 49152
FUZZ_EXAMPLES = max(200, settings.default.max_examples)
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return Engine(tiny_checkpoint("llama")[0], max_total_tokens=1024)


def _params(d):
    """The dict as a SamplingParams (InvalidRequestError if refused outright)."""
    try:
        return SamplingParams.from_dict(d)
    except TypeError as e:  # NOTE: only a non-mapping; from_dict refuses unknown keys itself
        raise InvalidRequestError("sampling_params", d, str(e)) from None


def _accepted(engine, requests):
    """The requests the engine accepts, each tried alone through generate's validation
    (refusals must be InvalidRequestError and leave the engine untouched)."""
    kept = []
    for prompt, d, abort_after in requests:
        try:
            engine.make_requests([prompt], [_params(d)])
        except InvalidRequestError as e:
            event(f"refused {e.field}")
            assert engine.scheduler.is_idle()
            continue
        kept.append((prompt, d, abort_after))
    engine.trackers.clear()  # NOTE: make_requests' bookkeeping for requests never queued
    return kept


def _serve(engine, requests):
    """Stream the requests together, aborting each after abort_after + 1 chunks; returns
    per request index its token ids and finish reason, and the indices we aborted."""
    prompts = [p for p, _, _ in requests]
    params = [_params(d) for _, d, _ in requests]
    tokens, reasons, chunks, rids, aborted = {}, {}, {}, {}, set()
    for out in engine.generate(prompts, params, stream=True):
        rids.setdefault(out.index, out.rid)
        tokens.setdefault(out.index, []).extend(out.token_ids)
        chunks[out.index] = chunks.get(out.index, 0) + 1
        if out.finished:
            reasons[out.index] = out.finish_reason
        for i, (_, _, after) in enumerate(requests):
            if after is not None and chunks.get(i, 0) > after and i not in reasons and i not in aborted:
                aborted.add(i)
                engine.abort(rids[i])
    return tokens, reasons, aborted


@FUZZ
@given(requests=fuzz_requests(VOCAB))
def test_fuzzed_requests_are_refused_cleanly_or_served_by_the_engine(engine, requests):
    """Refused: InvalidRequestError. Accepted: finished, greedy ones as alone. No leak."""
    kept = _accepted(engine, requests)
    event(f"accepted {len(kept)} of {len(requests)}")
    assert_idle_and_leak_free(engine)
    if not kept:
        return
    tokens, reasons, aborted = _serve(engine, kept)
    event(f"aborted {len(aborted)}")
    assert_idle_and_leak_free(engine)
    assert set(reasons) == set(range(len(kept))), "an accepted request never finished"
    for i, (prompt, d, _) in enumerate(kept):
        if i in aborted:
            continue
        assert reasons[i].type != "abort", f"accepted request {d} aborted: {reasons[i]}"
        if not _params(d).is_greedy:
            continue
        assert engine.generate(prompt, _params(d)).token_ids == tokens[i]
    assert_idle_and_leak_free(engine)


def _workload_request(i, prompt, d):
    return WorkloadRequest(f"r{i}", 0.001 * i, prompt, _params(d))


@FUZZ
@given(requests=fuzz_requests(SIM_VOCAB))
def test_fuzzed_requests_are_refused_cleanly_or_served_by_the_simulator(requests):
    """sim.run.simulate refuses a workload holding a request it could never serve, with
    InvalidRequestError naming it, before running; a workload of accepted requests runs to
    the end, each request getting the tokens it gets alone."""
    kept = []
    for i, (prompt, d, _) in enumerate(requests):
        try:
            alone = simulate(Workload([_workload_request(i, prompt, d)]), model=SIM_MODEL, keep_trace=True)
        except InvalidRequestError:
            continue
        record = alone.trace.requests[f"r{i}"]
        assert record.finish_reason is not None and record.finish_reason.type != "abort"
        kept.append((i, prompt, d, record.output_ids))
    event(f"accepted {len(kept)} of {len(requests)}")
    _assert_a_refused_request_refuses_the_workload(requests, {i for i, *_ in kept})
    if not kept:
        return
    together = simulate(Workload([_workload_request(i, p, d) for i, p, d, _ in kept]), model=SIM_MODEL, keep_trace=True)
    for i, _, _, ids in kept:
        assert together.trace.requests[f"r{i}"].output_ids == ids


def _assert_a_refused_request_refuses_the_workload(requests, accepted):
    """A workload holding a refused request (one that can be built) raises InvalidRequestError
    naming that request, whatever else it holds."""
    built = {}
    for i, (prompt, d, _) in enumerate(requests):
        try:
            built[i] = _workload_request(i, prompt, d)
        except InvalidRequestError:
            continue
    refused = sorted(set(built) - accepted)
    if not refused:
        return
    with pytest.raises(InvalidRequestError, match=f"request 'r{refused[0]}'"):
        simulate(Workload(list(built.values())), model=SIM_MODEL, keep_trace=True)
