"""A ModelRunner for scheduler tests: no model, tokens from a script, logits only as a shape."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shared.batch.cuda_graph import can_run_graph, padded_batch_size
from shared.batch.forward_batch import ForwardBatch
from shared.loop.model_runner import RunnerOutput
from shared.loop.scheduler import Scheduler
from shared.request.req import Req


def default_token(rid: str, index: int, vocab_size: int) -> int:
    """A deterministic token for output `index` of request `rid` (never 0, so never EOS 0)."""
    return 1 + (sum(map(ord, rid)) * 31 + index * 7) % (vocab_size - 1)


class ScriptedRunner:
    """`sample` returns `script(rid, output_index)` for each request of the batch."""

    def __init__(self, vocab_size: int, graph_sizes: list[int] | None = None,
                 script: Callable[[str, int], int] | None = None) -> None:
        self.vocab_size = vocab_size
        self.graph_sizes = graph_sizes or []
        self.script = script or (lambda rid, i: default_token(rid, i, vocab_size))

    def forward(self, fb: ForwardBatch) -> RunnerOutput:
        graph = can_run_graph(fb, self.graph_sizes)
        padded = padded_batch_size(fb.batch_size, self.graph_sizes) if graph else fb.batch_size
        return RunnerOutput(fb.logit_rows, (fb.batch_size, self.vocab_size), graph=graph,
                            padded_batch_size=padded)

    def sample(self, output: RunnerOutput, fb: ForwardBatch) -> np.ndarray:
        return np.array([self.script(rid, len(out)) for rid, out in zip(fb.rids, fb.output_ids, strict=True)],
                        dtype=np.int64)


def drive(scheduler: Scheduler, runner, reqs: list[Req], step_time: float = 0.01,
          max_steps: int = 100_000, build=ForwardBatch.init_new) -> float:
    """Run `reqs` (added when their arrival_time is reached) until nothing is left.
    Each step takes `step_time` simulated seconds; `build(batch)` makes its ForwardBatch.
    Returns the end time."""
    pending = sorted(reqs, key=lambda r: r.arrival_time)
    now, i = 0.0, 0
    for _ in range(max_steps):
        while i < len(pending) and pending[i].arrival_time <= now:
            scheduler.add_request(pending[i])
            i += 1
        batch = scheduler.get_next_batch_to_run(now)
        if batch is None:
            if i == len(pending):
                assert not scheduler.has_work(), "the scheduler stalled with work left"
                return now
            now = max(now, pending[i].arrival_time)
            continue
        fb = build(batch)
        out = runner.forward(fb)
        ids = runner.sample(out, fb)
        now += step_time
        scheduler.process_batch_result(batch, out, ids, now)
    raise AssertionError(f"workload did not finish in {max_steps} steps")
