"""`StepTable`: one row per step of a run, as the columns of `RunResult.steps` (STEP_COLUMNS
less `replica`), kept as numpy arrays per chunk of steps (`RunLog` folds them in): about 60
bytes a step instead of the step's record. What bound each step
is given with each chunk (the simulator's cost model: `sim.cost.step_bounds`; None: "").
"""

from __future__ import annotations

import operator

import numpy as np

from shared.trace.step_record import StepValues

_FIELDS = ("step", "forward_mode", "rids", "input_ids", "kv_used_tokens", "queue_len",
           "start_time", "duration")
_GET = operator.itemgetter(*(StepValues._fields.index(name) for name in _FIELDS))


class StepTable:
    def __init__(self) -> None:
        self._chunks: list[dict[str, np.ndarray]] = []

    def add(self, chunk: list[StepValues], bounds: list[str] | None) -> None:
        """Rows for these steps, in order, with each one's bound (None: "")."""
        step, mode, rids, ids, kv, queue, start, dur = zip(*map(_GET, chunk), strict=True)
        n = len(chunk)
        self._chunks.append({
            "step": np.array(step, np.int64), "forward_mode": np.array(mode, dtype=object),
            "batch_size": np.fromiter(map(len, rids), np.int64, n),
            "num_tokens": np.fromiter(map(len, ids), np.int64, n),
            "kv_used_tokens": np.array(kv, np.int64), "queue_len": np.array(queue, np.int64),
            "start_time": np.array(start, float), "duration": np.array(dur, float),
            "bound": np.array(bounds if bounds is not None else [""] * n, dtype=object)})

    def columns(self) -> dict[str, np.ndarray]:
        """Each column over every step added (empty arrays when none)."""
        if not self._chunks:
            return {}
        return {name: np.concatenate([c[name] for c in self._chunks]) for name in self._chunks[0]}
