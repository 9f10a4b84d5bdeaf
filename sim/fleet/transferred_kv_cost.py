"""`TransferredKVCost`: a decode instance's prices under prefill/decode disaggregation.

A decode instance admits requests whose prompt KV (and first token) came over the link from
a prefill instance (`sim.fleet.disaggregation`): the scheduler sees them as new requests with
nothing cached and runs them as an extend (mixed with the running decodes), but the engine
computes nothing for their prompt; it only decodes their next token over the received KV.
So an extend step costs what the decode step of all its requests costs, each row at its
sequence length; decode steps are priced as they are.
"""

from __future__ import annotations

import numpy as np

from sim.cost.base import BoundSplit, CostModel, StepCost
from sim.cost.batch_shape import BatchShape


class TransferredKVCost(CostModel):
    def __init__(self, inner: CostModel) -> None:
        self.inner = inner

    def step_cost(self, shape: BatchShape) -> StepCost:
        return self.inner.step_cost(as_decode(shape))

    def step_split(self, shape: BatchShape) -> BoundSplit:
        return self.inner.step_split(as_decode(shape))


def as_decode(shape: BatchShape) -> BatchShape:
    """The decode step of the shape's requests (itself if it is one)."""
    if shape.forward_mode.is_decode_or_idle() or shape.batch_size == 0:
        return shape
    return BatchShape.decode(np.asarray(shape.seq_lens, dtype=np.int64), shape.batch_size)
