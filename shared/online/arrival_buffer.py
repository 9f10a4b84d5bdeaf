"""`ArrivalBuffer`: requests an online engine has received but not admitted yet.

Under the overlap schedule a request that arrives while a step runs waits for the scheduling
after the next (`Scheduler.admission_time`); an online engine keeps it here meanwhile, in
order received, and can still end it (an abort, a shutdown) before it reaches the scheduler.
NOTE: a request id may be buffered twice; the scheduler refuses the second at admission.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ArrivalBuffer(Generic[T]):
    def __init__(self, arrival: Callable[[T], float], rid: Callable[[T], str]) -> None:
        self._arrival, self._rid = arrival, rid
        self._items: list[T] = []

    def __bool__(self) -> bool:
        return bool(self._items)

    def add(self, item: T) -> None:
        self._items.append(item)

    def take_until(self, t: float) -> list[T]:
        """Remove and return the items that arrived by `t`, in the order added."""
        return self._take(lambda i: self._arrival(i) <= t)

    def take(self, rid: str | None = None) -> list[T]:
        """Remove and return the items of request `rid` (None: every item)."""
        return self._take(lambda i: rid is None or self._rid(i) == rid)

    def _take(self, pick: Callable[[T], bool]) -> list[T]:
        taken = [i for i in self._items if pick(i)]
        self._items = [i for i in self._items if not pick(i)]
        return taken
