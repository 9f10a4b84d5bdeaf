"""`EngineThread`: the thread an online engine (`shared.online.online_engine`) runs on, beside the
server's event loop, and its life: start, wake, idle, stop, failure.

`turn()` runs again and again on the thread until it returns False (the engine is stopping
and idle). `stop()` closes the engine's inbox (`shared.online.engine_inbox`: later submits raise
EngineUnavailable) before it asks the loop to finish, so a turn that reads `stopping` and then
takes the inbox takes every request ever accepted. An exception in `turn()` ends the thread:
the inbox is closed naming it, `on_failure(exc)` runs there (tell every open request, and
every one still in the inbox) and `stop()` raises it. Not part of the spec's step semantics:
it only decides when the engine's own loop runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from shared.online.engine_inbox import EngineInbox

SHUTTING_DOWN = "the engine is not serving: it is shutting down"


class EngineThread:
    def __init__(self, name: str, inbox: EngineInbox, turn: Callable[[], bool],
                 on_failure: Callable[[BaseException], None]) -> None:
        self._name, self._inbox, self._turn, self._on_failure = name, inbox, turn, on_failure
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    @property
    def stopping(self) -> bool:
        """The inbox is closed (stop() was called, or the thread failed): read by `turn()`
        before it takes the inbox."""
        return self._inbox.closed is not None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """End the current `idle` wait (something was posted)."""
        self._wake.set()

    def idle(self, timeout_s: float) -> None:
        """Wait, on the engine's thread, until woken or `timeout_s` passed."""
        self._wake.wait(timeout_s)
        self._wake.clear()

    def stop(self) -> None:
        """Close the inbox, ask the loop to finish, join it; RuntimeError if it failed."""
        self._inbox.close(SHUTTING_DOWN)
        self.wake()
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"the engine's thread failed: {self.error!r}") from self.error

    def _run(self) -> None:
        try:
            while self._turn():
                pass
        except BaseException as e:  # NOTE: every open request learns of it, then stop() raises
            self.error = e
            self._inbox.close(f"the engine is not serving: it failed ({e!r})")
            self._on_failure(e)
