"""`ReplicaLoop`: one fleet replica's engine loop (`sim.run.driver.EngineLoop`) that keeps its
scheduler's load between the times it can change, for the router to read.

A replica's scheduler changes only while its own engine process runs (admitting, scheduling,
processing a result, applying a decode run), never while it waits on a step, a sleep or an
arrival. So the load it reported stays its load until its process next runs: a router
reading every replica at every arrival computes only the loads of the replicas that moved
since their last reading (`SchedulerLoad`, by `Scheduler.load`, unchanged in value).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from sim.run.driver import EngineLoop, FinishedHook, supports_decode_runs

if TYPE_CHECKING:
    from collections.abc import Iterator

    import simpy
    from tqdm import tqdm

    from shared.loop.model_runner import ModelRunner
    from shared.loop.scheduler import Scheduler
    from shared.loop.scheduler_load import SchedulerLoad


class Replica(NamedTuple):
    """One engine of a fleet: its scheduler, runner and finished hook (`sim.fleet.driver`)."""

    scheduler: Scheduler
    runner: ModelRunner
    finished_hook: FinishedHook | None = None


class ReplicaLoop(EngineLoop):
    """An EngineLoop whose `load()` is its scheduler's, computed once per change."""

    _load: SchedulerLoad | None = None   # None: the scheduler may have moved since last read

    def load(self) -> SchedulerLoad:
        if self._load is None:
            self._load = self.scheduler.load()
        return self._load

    def engine(self) -> Iterator[simpy.Event]:
        """The engine's process. NOTE: whatever it changed since it last resumed is done by
        the time it yields: the load is read afresh after each of its turns."""
        for event in super().engine():
            self._load = None
            yield event
        self._load = None

    def admit_until(self, t: float) -> bool:
        """NOTE: a replica's own admission may route (`Inbox.due`), reading every replica,
        this one included, midway through its turn (after its last result, before what it
        admits): its load is read afresh. Its turn reads nothing else until it next admits
        or yields."""
        self._load = None
        return super().admit_until(t)


def make_loop(env: simpy.Environment, r: Replica, source, bar: tqdm | None, decode_runs: bool
              ) -> ReplicaLoop:
    loop = ReplicaLoop(env, r.scheduler, r.runner, source, None, r.finished_hook, bar)
    loop.decode_runs = decode_runs and supports_decode_runs(r.runner, None, r.finished_hook)
    return loop
