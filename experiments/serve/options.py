"""`ServeOptions`: the server's own settings, apart from the engine's."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeOptions:
    """`max_queued_requests` (SGLang's `--max-queued-requests`): more requests than this
    waiting for their first token get 503 with a Retry-After hint (None: no limit).
    `trace_out`: where the engine's step trace is saved at shutdown (None: not saved)."""

    max_queued_requests: int | None = None
    trace_out: str | None = None
    retry_after_s: int = 1
