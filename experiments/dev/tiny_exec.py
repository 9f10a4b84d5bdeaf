"""The real executor on a tiny checkpoint, as the agreement checks drive it (ARCHITECTURE §6):
`TinyExec` (a conformance-kit runner factory around the checkpoint's weights, with the
clock both executors run under: the roofline by default), `TINY_INFO` (the tiny checkpoints' ModelInfo) and
`ARRIVAL_TICK` (the arrival spacing of the drawn workloads). Shared by
tests/test_agreement*.py and `python -m experiments.dev.mutation_check`.
"""

from __future__ import annotations

import json

from exec.loading.model_files import load_model
from exec.runner.model_runner import TorchModelRunner
from experiments.dev.tiny_models import COMMON
from shared import ModelInfo, Scheduler, Trace, TraceHeader
from sim.cost.base import CostModel
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape

TINY_INFO = ModelInfo(COMMON["vocab_size"], (COMMON["eos_token_id"],),
                      COMMON["max_position_embeddings"])
ARRIVAL_TICK = 1e-4   # the tiny model's roofline step on an H100 is ~0.19 ms


class TinyExec:
    """The tiny checkpoint's weights, loaded once; `make_runner` is a conformance-kit runner
    factory giving each example a fresh TorchModelRunner (fresh KV pool) around them."""

    def __init__(self, folder, clock: CostModel | None = None) -> None:
        self.model = load_model(folder)
        self.config_json = json.loads((folder / "config.json").read_text())
        # the header its runs' traces carry (check_conformance / check_agreement's header)
        self.header = TraceHeader(self.config_json, {"kind": "exec", "device": "cpu", "dtype": "float32"})
        self.clock = clock or RooflineCostModel(get_model_shape(self.config_json), get_hardware("h100"))

    def make_runner(self, scheduler: Scheduler, reference: Trace | None = None) -> TorchModelRunner:
        return TorchModelRunner(self.model, scheduler.config, scheduler.model_info)
