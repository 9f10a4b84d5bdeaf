"""A trace written as the run goes (`save_trace`, a lean run's TraceWriter) is the file
`Trace.save` writes of the same run kept whole, byte for byte, wherever the steps are folded,
and reads back as that trace; a run that fails leaves no file."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.trace.run_log import Keep
from shared.trace.trace import Trace
from sim.model.embedded_configs import config_dict
from sim.run.build import build_simulation, load_model, model_info
from sim.run.driver import drive_workload
from sim.run.simulate import simulate
from tests.strategies import generator_workloads, small_engine_args

TINY = {**config_dict("smollm2-135m"), "vocab_size": 64}


@settings(max_examples=max(40, settings.default.max_examples), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), chunk=st.sampled_from((1, 3, 2048)), overlap=st.booleans())
def test_a_trace_written_as_it_goes_is_the_saved_trace_byte_for_byte(tmp_path, data, chunk,
                                                                     overlap):
    workload = data.draw(generator_workloads(model_info(*load_model(TINY))))
    engine = {**data.draw(small_engine_args(workload)), "disable_overlap_schedule": not overlap}
    whole, streamed = tmp_path / f"whole{chunk}.jsonl", tmp_path / f"streamed{chunk}.jsonl"
    simulate(workload, model=TINY, keep_trace=True, bounds=False, **engine).trace.save(whole)
    s = build_simulation(model=TINY, bounds=False, keep=Keep(
        trace=False, chunk_steps=chunk, trace_file=streamed), **engine)
    log = drive_workload(s.scheduler, s.runner, workload, finished_hook=s.token_source.finished)
    log.finish()
    assert streamed.read_bytes() == whole.read_bytes()
    assert Trace.load(streamed).steps == Trace.load(whole).steps


def test_simulate_save_trace_writes_the_trace_and_keeps_none(tmp_path):
    from shared import ShareGPTLike

    w = ShareGPTLike(40).build(vocab_size=128256, seed=2, rate=25)
    full = simulate(w, model="llama-3-8b", keep_trace=True)
    lean = simulate(w, model="llama-3-8b", save_trace=tmp_path / "t.jsonl")
    full.trace.save(tmp_path / "full.jsonl")
    assert lean.trace is None
    assert (tmp_path / "t.jsonl").read_bytes() == (tmp_path / "full.jsonl").read_bytes()
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_a_fleet_refuses_save_trace_naming_where_its_traces_are(tmp_path):
    from shared import ShareGPTLike
    from sim.fleet.fleet_layout import Fleet

    w = ShareGPTLike(4).build(vocab_size=128256, seed=2, rate=25)
    with pytest.raises(ValueError, match=r"result\.traces"):
        simulate(w, None, Fleet(2), model="llama-3-8b", save_trace=tmp_path / "t.jsonl")
