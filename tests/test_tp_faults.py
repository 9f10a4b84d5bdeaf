"""A forward that fails on one rank of a tensor-parallel world (`exec.engine.tp_worker`) is fatal to
the world, as in SGLang: no rank is left waiting in a collective, `launch` raises
TPStartError naming the rank, and every open request ends with that error.

The fault is injected by the test (`Fault`, passed as `TPJob.on_runner`): a ValueError at
the input of the last decoder layer, after the embedding's and the first layer's
all-reduces, so the other ranks are inside the forward's collectives when it raises. Each
world runs in a process of its own session, killed with its ranks when it hangs: a world
that has not ended END_S after its fault fails the test (a hang detector; the ranks' gloo
timeout, longer, is not what ends them).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from exec.engine.tp_worker import TPJob, launch

END_S = 60.0       # a world that has not ended this long after its fault hangs
START_S = 600.0    # a world whose fault has not fired by then hangs starting (2 slow cores)
DIST_TIMEOUT_S = 120.0  # the ranks' collectives' (torch's default is 30 min)
FAIL_GRACE_S = 3.0   # rank 0's time to end its requests once a follower ended (the online
                     # job keeps serving after that, so its world always waits this long)
PARAMS = {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True}
PROMPTS = [[1, 2, 3, 4, 5, 6], [7, 8, 9], [10, 11, 12, 13]]


@dataclass(frozen=True)
class Fault:
    """On `rank`: raise in its `nth` forward of `mode` ("extend" or "decode"), mid-forward
    (the last decoder layer's input); `fired` (a file) is created just before."""
    rank: int
    mode: str
    nth: int
    fired: str

    def __call__(self, runner) -> None:
        if runner.group.rank != self.rank:
            return
        seen, armed, forward = {"extend": 0, "decode": 0}, [False], runner.forward

        def counting(fb):
            mode = "decode" if fb.forward_mode.is_decode() else "extend"
            seen[mode] += 1
            armed[0] = mode == self.mode and seen[mode] == self.nth
            return forward(fb)

        def raise_when_armed(module, args):
            if armed[0]:
                Path(self.fired).touch()
                raise ValueError(f"injected fault on rank {self.rank}")

        runner.forward = counting
        runner.model.model.layers[-1].register_forward_pre_hook(raise_when_armed)


def _launch_in_session(job: TPJob, conn) -> None:
    """The world's process: launch `job` on 2 ranks; send None or the error it raised."""
    os.setsid()  # NOTE: the test kills this session (the ranks with it) when the world hangs
    try:
        launch(2, job)
        conn.send(None)
    except BaseException as e:
        conn.send(f"{type(e).__name__}: {e}")


def run_world(job: TPJob, fired: Path) -> str | None:
    """Run `job`'s world to its end: the error `launch` raised (None if it returned). Fails
    the test when the fault never fired or the world did not end END_S after it."""
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    world = ctx.Process(target=_launch_in_session, args=(job, send))
    world.start()
    try:
        deadline = time.monotonic() + START_S
        while world.is_alive() and not fired.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fired.exists(), f"the injected fault never fired; the world: {_result(recv, world)}"
        world.join(END_S)
        assert not world.is_alive(), f"the world did not end {END_S:.0f} s after the fault: a rank waits"
    finally:
        if world.is_alive():
            os.killpg(world.pid, signal.SIGKILL)
            world.join()
    return _result(recv, world)


def _result(recv, world) -> str | None:
    if recv.poll():
        return recv.recv()
    return "still running" if world.is_alive() else f"its process exited with {world.exitcode}"


def _record(out_path: str, ends: dict) -> None:
    with open(out_path, "wb") as f:
        pickle.dump(ends, f)


def _generate(engine, out_path: str) -> None:
    """Rank 0's offline job: two calls (the second's extend reuses the first's prefix);
    records the error they raised (None if none did)."""
    try:
        engine.generate(PROMPTS[:2], PARAMS)
        engine.generate([[*PROMPTS[0], 20], PROMPTS[2]], PARAMS)
    except Exception as e:
        _record(out_path, {"generate": str(e)})
        raise
    _record(out_path, {"generate": None})


class Ends:
    """The requests' last events; `all_done` is set once each of `n` has ended."""

    def __init__(self, n: int) -> None:
        self.finishes, self.n, self.all_done = {}, n, threading.Event()

    def on_event(self, rid: str):
        def record(event) -> None:
            if event.finish is not None:
                self.finishes[rid] = event.finish
                if len(self.finishes) == self.n:
                    self.all_done.set()
        return record


def _serve(engine, out_path: str) -> None:
    """Rank 0's online job: the requests of PROMPTS submitted at once; records how each
    ended (its abort message; None when it did not end in END_S or ended otherwise), then
    serves on, as a server whose engine failed would: the world must end without it."""
    from exec.engine.online_engine import ExecStepper
    from shared.online.serving_loop import ServingLoop
    from shared.request.sampling_params import SamplingParams

    online, ends = ServingLoop(ExecStepper(engine, "tiny")), Ends(len(PROMPTS))
    online.start()
    for i, prompt in enumerate(PROMPTS):
        online.submit(f"r{i}", prompt, SamplingParams(**PARAMS), ends.on_event(f"r{i}"))
    ends.all_done.wait(END_S)
    finishes = {f"r{i}": ends.finishes.get(f"r{i}") for i in range(len(PROMPTS))}
    _record(out_path, {rid: f.message if f is not None and f.type == "abort" else None
                       for rid, f in finishes.items()})
    time.sleep(10 * END_S)
    online.stop()


# rank, the forward it fails in (mode, nth of that mode), rank 0's job: each rank fails in
# the first forward (an extend) and in a later one (a decode, on the overlap schedule's
# forward thread), under the offline and the online engine
CASES = [(0, "extend", 1, _generate), (1, "decode", 3, _generate),
         (0, "decode", 2, _serve), (1, "extend", 1, _serve)]


@pytest.mark.parametrize(("rank", "mode", "nth", "main"), CASES,
                         ids=[f"rank{r}-{m}{n}-{j.__name__[1:]}" for r, m, n, j in CASES])
def test_a_fault_on_any_rank_in_any_forward_ends_the_world_and_its_requests_naming_the_rank(
        rank, mode, nth, main, tiny_checkpoint, tmp_path):
    """A forward raising on one rank (rank 0 after its broadcast, or a follower) ends every
    rank within END_S; launch raises TPStartError naming that rank and its error (not a
    peer's broken collective), and every open request (offline: the generate call) ended
    with an error naming them."""
    fired, out = tmp_path / "fired", tmp_path / "ends"
    job = TPJob(str(tiny_checkpoint("llama")[0]), main, (str(out),), {"max_total_tokens": 256},
                dist_timeout_s=DIST_TIMEOUT_S, fail_grace_s=FAIL_GRACE_S,
                on_runner=Fault(rank, mode, nth, str(fired)))
    error = run_world(job, fired)
    fault = f"rank {rank}: ValueError: injected fault on rank {rank}"
    assert error == f"TPStartError: a tensor-parallel rank failed: {fault}"
    with open(out, "rb") as f:
        ends = pickle.load(f)
    assert ends and all(message is not None and fault in message for message in ends.values()), ends
