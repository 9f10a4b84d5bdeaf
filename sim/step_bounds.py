"""`step_bounds`: what bound every step of a simulated run (`CostModel.step_bound`), from its
trace: each recorded batch re-priced once after the run, so the simulation's hot path (and
its decode runs, priced without building shapes) is untouched and the trace format with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shared.forward_mode import ForwardMode
from sim.batch_shape import BatchShape
from sim.cost_model import CostModel

if TYPE_CHECKING:
    from shared.trace import Trace

SHAPE_FIELDS = ("forward_mode", "seq_lens", "extend_prefix_lens", "pruned_rows",
                "padded_batch_size", "input_ids")


def step_bounds(model: CostModel, trace: Trace, overlap: bool = False) -> list[str]:
    """[len(trace)] the bound of each step (`sim.cost_model.BOUNDS`) as `model` prices its
    recorded batch (at its recorded padded size), under the overlap schedule when `overlap`."""
    if not len(trace):
        return []
    columns = trace.step_columns(*SHAPE_FIELDS)
    return [step_bound(model, overlap, *row) for row in zip(*columns, strict=True)]


def step_bound(model: CostModel, overlap: bool, mode: str, seq_lens, *fields) -> str:
    """One step's bound from its trace fields (SHAPE_FIELDS); decode steps through the
    model's `decode_step_bound` (no BatchShape built)."""
    if mode == "DECODE":
        return model.decode_step_bound(np.asarray(seq_lens, dtype=np.int64),
                                       fields[2] or len(seq_lens), overlap)
    return model.step_bound(shape_of(mode, seq_lens, *fields), overlap)


def shape_of(mode: str, seq_lens, prefix_lens, pruned_rows, padded: int,
             input_ids) -> BatchShape:
    """The BatchShape of one step from its trace fields (as `BatchShape.from_step_record`,
    unchecked: the trace is the run's own)."""
    fm = ForwardMode[mode]
    if fm.is_decode_or_idle():
        return BatchShape.decode(np.asarray(seq_lens, dtype=np.int64),
                                 padded or len(seq_lens), fm)
    return BatchShape.extend_trusted(fm, np.asarray(seq_lens).tolist(),
                                     np.asarray(prefix_lens).tolist(), len(pruned_rows),
                                     padded or len(seq_lens), len(input_ids))
