"""`EngineInbox`: what the server's threads post to an online engine's thread (submits and
aborts), and which requests are open: accepted, their last event not sent yet.

Thread-safe: any thread posts, the engine's thread takes. One lock orders posting against
`close()`, so that every request is either refused (`submit` raises EngineUnavailable, nothing
posted) or posted before the close, where the engine's thread still takes it and answers it
(`EngineThread` closes the inbox before it asks the loop to finish). A request stays open from
its post until the engine sends its last event, so `abort` knows it wherever it is: in the
inbox, not admitted yet, or in the scheduler.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from threading import Lock
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

from shared.online.online_engine import EngineUnavailable

if TYPE_CHECKING:
    from shared.online.online_engine import TokenEvent

T = TypeVar("T")
OnEvent = Callable[["TokenEvent"], None]


class Abort(NamedTuple):
    """A posted `abort(rid)`: end every open request `rid`, aborted."""
    rid: str


class EngineInbox(Generic[T]):
    def __init__(self) -> None:
        self._lock = Lock()
        self._items: list[T | Abort] = []
        self._open: Counter[str] = Counter()   # rid -> its requests posted and not ended
        self.closed: str | None = None          # NOTE: why later submits are refused

    def submit(self, rid: str, on_event: OnEvent, build: Callable[[OnEvent], T]) -> None:
        """Post `build(tell)`, request `rid`'s item for the engine's thread, where `tell`
        passes the engine's events on to `on_event` and ends the request here at its last
        one (events after a last one are dropped: each request has exactly one). Raises
        EngineUnavailable, posting nothing, once closed."""
        item = build(_Tell(self, rid, on_event))
        with self._lock:
            if self.closed is not None:
                raise EngineUnavailable(self.closed)
            self._items.append(item)
            self._open[rid] += 1

    def abort(self, rid: str) -> bool:
        """True if a request `rid` is open: it now ends aborted (once closed, the engine's
        shutdown or failure aborts it), unless its last event (a stop, the length) is already
        decided on the engine's thread. False, posting nothing, if no request `rid` is open."""
        with self._lock:
            if not self._open[rid]:   # NOTE: a Counter's missing key reads 0, adds nothing
                return False
            if self.closed is None:
                self._items.append(Abort(rid))
            return True

    def take(self) -> list[T | Abort]:
        """Remove and return every posted item, in the order posted (the engine's thread)."""
        with self._lock:
            items, self._items = self._items, []
        return items

    def close(self, reason: str) -> None:
        """Refuse later submits with EngineUnavailable(reason); what was posted stays to be
        taken. A second close keeps the first reason."""
        with self._lock:
            if self.closed is None:
                self.closed = reason

    def end(self, rid: str) -> None:
        """One request `rid` got its last event: it is no longer open (`abort` no longer
        counts it)."""
        with self._lock:
            self._open[rid] -= 1
            if not self._open[rid]:
                del self._open[rid]


class _Tell:
    """A request's `on_event` as the engine calls it; its last event ends the request in
    the inbox first, so that `abort` no longer counts it."""

    def __init__(self, inbox: EngineInbox, rid: str, on_event: OnEvent) -> None:
        self._inbox, self._rid, self._on_event, self._ended = inbox, rid, on_event, False

    def __call__(self, event: TokenEvent) -> None:
        if self._ended:   # NOTE: a second last event would end a twin of the same rid here
            return
        if event.finish is not None:
            self._ended = True
            self._inbox.end(self._rid)
        self._on_event(event)
