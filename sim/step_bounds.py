"""`step_bounds`: what bound every step of a simulated run (`CostModel.step_bound`), from its
trace: each recorded batch re-priced once after the run, so the simulation's hot path (and
its decode runs, priced without building shapes) is untouched and the trace format with it.
The decode steps go to the model together (`CostModel.decode_step_bounds`), the others one
by one as BatchShapes.
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
    rows = list(zip(*trace.step_columns(*SHAPE_FIELDS), strict=True))
    decode = [i for i, row in enumerate(rows) if row[0] == "DECODE"]
    bounds = ["" if row[0] == "DECODE" else model.step_bound(shape_of(*row), overlap)
              for row in rows]
    decoded = model.decode_step_bounds([rows[i][1] for i in decode],
                                       [rows[i][4] or len(rows[i][1]) for i in decode], overlap)
    for i, bound in zip(decode, decoded, strict=True):
        bounds[i] = bound
    return bounds


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
