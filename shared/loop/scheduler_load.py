"""`SchedulerLoad`: how busy one scheduler is at an instant, as an engine reports it to a
router (SGLang's `/get_load`, vLLM's `num_requests_running` / `num_requests_waiting`):
requests running (decoding, or mid-way through a chunked prefill) and queued, and their
tokens (a running request's KV: prompt plus output so far; a queued one's prompt).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from shared.batch.schedule_batch import ScheduleBatch
    from shared.request.req import Req


class SchedulerLoad(NamedTuple):
    running_requests: int = 0
    queued_requests: int = 0
    running_tokens: int = 0
    queued_tokens: int = 0

    @property
    def requests(self) -> int:
        return self.running_requests + self.queued_requests

    @property
    def tokens(self) -> int:
        """Running plus queued tokens (the `least_load` routers' measure)."""
        return self.running_tokens + self.queued_tokens


def scheduler_load(waiting: Sequence[Req], batches: Iterable[ScheduleBatch | None],
                   chunked: Req | None) -> SchedulerLoad:
    """The load of a scheduler with these queued requests, these batches holding running
    requests (a request in more than one counts once; finished ones not at all) and this
    chunked request."""
    running = {id(r): r for b in batches if b is not None for r in b.reqs if not r.finished()}
    if chunked is not None:
        running[id(chunked)] = chunked
    return SchedulerLoad(len(running), len(waiting), sum(r.seqlen for r in running.values()),
                         sum(len(r.origin_input_ids) for r in waiting))
