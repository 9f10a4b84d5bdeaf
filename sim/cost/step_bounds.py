"""`step_bounds`: what bound every step of a simulated run (`CostModel.step_bound`), from its
trace: each recorded batch re-priced once after the run, so the simulation's hot path (and
its decode runs, priced without building shapes) is untouched and the trace format with it.
The decode steps go to the model together (`CostModel.decode_step_bounds`), the extend steps
too (`CostModel.extend_step_bounds`), any other (idle) one by one as a BatchShape.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from shared.batch.forward_mode import ForwardMode
from shared.trace.step_record import SHAPE_FIELDS
from sim.cost.base import CostModel
from sim.cost.batch_shape import BatchShape
from sim.cost.extend_steps import ExtendSteps

if TYPE_CHECKING:
    from shared.trace.trace import Trace



def step_bounds(model: CostModel, trace: Trace, overlap: bool = False) -> list[str]:
    """[len(trace)] the bound of each step (`sim.cost.base.BOUNDS`) as `model` prices its
    recorded batch (at its recorded padded size), under the overlap schedule when `overlap`."""
    if not len(trace):
        return []
    return bounds_of_columns(model, trace.step_columns(*SHAPE_FIELDS), overlap)


def chunk_bounds(model: CostModel, overlap: bool) -> Callable[[list[list]], list[str]]:
    """`step_bounds` of a chunk of recorded steps from their SHAPE_FIELDS columns, as a
    RunLog folds them in (`shared.trace.run_log.StepPricer`)."""
    return functools.partial(bounds_of_columns, model, overlap=overlap)


def bounds_of_columns(model: CostModel, columns: list[list], overlap: bool) -> list[str]:
    """The bound of each step from its SHAPE_FIELDS columns (one list per field)."""
    modes, seqs, prefixes, pruned, padded, ids = columns
    padded = [p or len(s) for p, s in zip(padded, seqs, strict=True)]
    decode = [i for i, m in enumerate(modes) if m == "DECODE"]
    extend = [i for i, m in enumerate(modes) if m in ("EXTEND", "MIXED")]
    other = sorted(set(range(len(modes))) - set(decode) - set(extend))
    bounds = [""] * len(modes)
    _place(bounds, decode, model.decode_step_bounds([seqs[i] for i in decode],
                                                    [padded[i] for i in decode], overlap))
    _place(bounds, extend, model.extend_step_bounds(ExtendSteps(
        [ForwardMode[modes[i]] for i in extend], [seqs[i] for i in extend],
        [prefixes[i] for i in extend], [len(pruned[i]) for i in extend],
        [padded[i] for i in extend], [len(ids[i]) for i in extend]), overlap))
    _place(bounds, other, [model.step_bound(BatchShape.decode(
        np.asarray(seqs[i], dtype=np.int64), padded[i], ForwardMode[modes[i]]), overlap)
        for i in other])
    return bounds


def _place(bounds: list[str], at: list[int], values: list[str]) -> None:
    """bounds[at[j]] = values[j] for every j."""
    for i, value in zip(at, values, strict=True):
        bounds[i] = value
