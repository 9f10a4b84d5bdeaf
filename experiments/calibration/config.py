"""`CalibrationConfig`: what `batchtwin calibrate` measures and how (experiments.calibration.run).

NOTE: its own module, free of torch, so that the command line can build its parsers (and
run `batchtwin simulate` or `plan`) without importing the real executor.
"""

from __future__ import annotations

from dataclasses import dataclass

from experiments.calibration.grid import HELD_OUT_GRID, TRAIN_GRID, ShapeGrid


@dataclass(frozen=True)
class CalibrationConfig:
    model: str | None = None        # None: SmolLM2-135M if installed, else a tiny random model
    device: str = "cpu"
    dtype: str = "bfloat16"
    threads: int = 1                # NOTE: on a small shared host, 1 thread is far steadier
    repeats: int = 2
    chunk_size: int = 1024          # chunked_prefill_size of the calibration engine
    max_total_tokens: int = 32768
    online_requests: int = 24       # the real trace re-priced by sim.run.replay
    online_rate: float = 4.0
    online_prompt_median: float = 128.0
    online_output_median: float = 32.0
    seed: int = 0
    temperature: float = 1.0        # sampling temperature of every measured request (0: greedy)
    train_grid: ShapeGrid = TRAIN_GRID
    held_out_grid: ShapeGrid = HELD_OUT_GRID
