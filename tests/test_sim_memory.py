"""Repeated simulations in one process give their memory back (a planner runs thousands).

The driver pauses the cyclic collector during a run (sim.run.driver.cyclic_gc_paused), so a run's
objects must be freed by reference counting alone once the caller drops them: no object of
the project may end in a reference cycle.
"""

import gc
from pathlib import Path

from shared.workload.sharegpt import ShareGPTLike
from shared.workload.workload import Workload
from sim.run.simulate import simulate

STATUS = Path("/proc/self/status")


def _memory_mb() -> tuple[float, float]:
    """(resident, virtual) memory of this process in MB, from /proc/self/status."""
    fields = dict(line.split(":", 1) for line in STATUS.read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmSize"].split()[0]) / 1024


def _run(workload: Workload) -> None:
    simulate(workload, model="qwen3-8b", hardware="h100")


def test_fifty_simulations_hold_the_memory_of_five():
    """Memory after 50 runs (50 requests each, Qwen3-8B on an H100) is within a few MB of
    memory after 5: each run's KV pools and radix tree are freed when it ends."""
    workload = ShareGPTLike(50).build(vocab_size=151936, seed=0, rate=10.0)
    for _ in range(5):
        _run(workload)
    rss5, vms5 = _memory_mb()
    for _ in range(45):
        _run(workload)
    rss50, vms50 = _memory_mb()
    assert rss50 - rss5 < 8, f"resident memory grew {rss50 - rss5:.1f} MB over 45 runs"
    assert vms50 - vms5 < 64, f"virtual memory grew {vms50 - vms5:.0f} MB over 45 runs"


def test_a_finished_simulation_leaves_no_project_object_in_a_cycle():
    """With the collector off, a run dropped by its caller leaves no object of shared/, sim/
    or exec/ to the cyclic collector (SimPy's environment keeps a small cycle of its own)."""
    workload = ShareGPTLike(30).build(vocab_size=151936, seed=1, rate=10.0)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        _run(workload)
        gc.collect()
        ours = sorted({type(o).__module__ + "." + type(o).__qualname__ for o in gc.garbage
                       if type(o).__module__.split(".")[0] in {"shared", "sim", "exec"}})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert ours == [], f"project objects in reference cycles: {ours}"
