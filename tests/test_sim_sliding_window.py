"""Sliding-window layers (sim/model/sliding_window.py): read from config.json's layer_types,
priced over their window by both cost models, exactly as step by step in decode runs."""

import dataclasses
import itertools

import numpy as np
import pytest

from shared.workload.synthetic import Synthetic
from sim.cost.batch_shape import BatchShape
from sim.cost.kernel.model import KernelCostModel
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.lookup import get_hardware
from sim.model.from_config import config_dict, get_model_shape
from sim.model.sliding_window import window_savings
from sim.run.build import build_simulation
from sim.run.driver import drive_workload

H100 = get_hardware("h100")
MODELS = (KernelCostModel, RooflineCostModel)


def test_window_savings_count_the_keys_past_each_querys_window():
    """Against counting key by key: a query at position q scores min(q + 1, W) keys."""
    for p, e, w in itertools.product(range(12), range(1, 12), range(1, 8)):
        reads = max(0, p + 1 - w) if p + e > w else 0
        pairs = sum(max(0, q + 1 - w) for q in range(p, p + e))
        assert window_savings([p, 3], [e, 1], w) == (reads + max(0, 4 - w),
                                                     pairs + max(0, 4 - w))


def test_gpt_oss_alternates_sliding_and_full_layers():
    for key, layers in (("gpt-oss-20b", 24), ("gpt-oss-120b", 36)):
        m = get_model_shape(key)
        assert (m.sliding_window, m.sliding_layers, m.num_layers) == (128, layers // 2, layers)
    assert get_model_shape("llama-3-8b").sliding_layers == 0


def test_an_unknown_layer_types_entry_is_refused_by_name():
    config = config_dict("gpt-oss-20b")
    config["layer_types"] = ["linear_attention", *config["layer_types"][1:]]
    with pytest.raises(ValueError, match="layer_types entry 'linear_attention'"):
        get_model_shape(config)
    config["layer_types"] = config["layer_types"][:3]
    with pytest.raises(ValueError, match="one attention kind per layer"):
        get_model_shape(config)


@pytest.mark.parametrize("cls", MODELS)
def test_windows_cut_long_contexts_only(cls):
    """Below the window a sliding layer is a full one; at 22k tokens decoding and a long
    extend cost less than with every layer full."""
    m = get_model_shape("gpt-oss-20b")
    full = cls(dataclasses.replace(m, sliding_window=None, sliding_layers=0), H100)
    swa = cls(m, H100)
    short = BatchShape.decode(np.array([100] * 8), 8)
    assert swa.step_time(short) == full.step_time(short)
    for shape in (BatchShape.decode(np.array([22000] * 8), 8),
                  BatchShape.build("EXTEND", [20192], [12000], 1)):
        assert swa.step_time(shape) < full.step_time(shape)


@pytest.mark.parametrize("cls", MODELS)
def test_decode_times_and_bounds_of_a_windowed_model_are_its_steps(cls):
    """The decode-run prices (and bounds) equal pricing each step, across the window."""
    model = cls(get_model_shape("gpt-oss-20b"), H100)
    lens = np.array([120, 126, 700])
    times = model.decode_step_times(lens, 4)
    for j in range(12):
        shape = BatchShape.decode(lens + j, 4)
        assert next(times) == model.step_time(shape)
        assert model.decode_step_bounds([(lens + j).tolist()], [4]) == [model.step_bound(shape)]


def test_a_windowed_model_simulates_the_same_with_and_without_decode_runs():
    """Decode runs (priced step by step for a windowed model) leave every step as it was."""
    w = Synthetic(24, 300, 60).build(vocab_size=1000, seed=3, rate=40.0)
    traces = []
    for runs in (True, False):
        s = build_simulation(model="gpt-oss-20b", hardware="h100")
        traces.append(drive_workload(s.scheduler, s.runner, w, finished_hook=s.token_source.finished,
                                     decode_runs=runs))
    a, b = ([(r.forward_mode, r.start_time, r.duration) for r in t.steps] for t in traces)
    assert a == b and len(a) > 60
