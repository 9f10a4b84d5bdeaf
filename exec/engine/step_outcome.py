"""`StepOutcome`: what one `Engine.step` ran and what it finished (`Engine.step` returns None
when nothing ran)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from shared.batch.forward_batch import ForwardBatch
    from shared.request.req import Req


class StepOutcome(NamedTuple):
    forward_batch: ForwardBatch   # the batch that ran (its rows, after any failed ones left)
    finished: list[Req]           # the requests finished since the last step, in order
