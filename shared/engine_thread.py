"""`EngineThread`: the thread an online engine (`shared.online_engine`) runs on, beside the
server's event loop, and its life: start, wake, idle, stop, failure.

`turn()` runs again and again on the thread until it returns False (the engine is stopping
and idle). An exception in it ends the thread: `on_failure(exc)` runs there (tell every open
request), later submits are refused (`check_serving` raises EngineUnavailable) and `stop()`
raises it. Not part of the spec's step semantics: it only decides when the engine's own
loop runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from shared.online_engine import EngineUnavailable


class EngineThread:
    def __init__(self, name: str, turn: Callable[[], bool],
                 on_failure: Callable[[BaseException], None]) -> None:
        self._name, self._turn, self._on_failure = name, turn, on_failure
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.stopping = False                      # NOTE: set by stop(), read by turn()
        self.error: BaseException | None = None

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

    def check_serving(self) -> None:
        """Raise EngineUnavailable once stopping or failed."""
        if self.error is not None:
            raise EngineUnavailable(f"the engine is not serving: it failed ({self.error!r})")
        if self.stopping:
            raise EngineUnavailable("the engine is not serving: it is shutting down")

    def stop(self) -> None:
        """Ask the loop to finish, join it; RuntimeError if it failed."""
        self.stopping = True
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
            self._on_failure(e)
