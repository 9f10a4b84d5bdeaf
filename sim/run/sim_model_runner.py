"""`SimModelRunner`: the spec's ModelRunner, pricing each batch instead of computing it.

`forward(fb)` makes the same CUDA-graph decision exec's runner makes on a GPU
(`cuda_graph_batch_sizes(config)`, `can_run_graph`, `padded_batch_size`), prices the batch
at the size it runs at with a `CostModel`, and returns the spec's logit rows with no logits
(`RunnerOutput.duration` is the priced step time). `sample` takes one id per request from a
`TokenSource`, for output index `len(output_ids)` (told the sampling parameters of an
EXTEND or MIXED batch's requests first: `TokenSource.add_requests`); the scheduler discards the id of an
intermediate prefill chunk (it records -1), but the runner still returns one per row.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from shared.batch.cuda_graph import (
    can_run_graph,
    cuda_graph_batch_sizes,
    graph_fits,
    padded_batch_size,
)
from shared.batch.forward_batch import ForwardBatch
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.model_runner import RunnerOutput
from sim.cost.base import CostModel
from sim.cost.batch_shape import BatchShape
from sim.run.token_source import TokenSource


class DecodeRunTimes(NamedTuple):
    """The priced steps of a decode run (shared.loop.decode_run), as `forward` prices each."""

    durations: Iterator[float]  # seconds of step j, priced when drawn
    graph: bool
    padded_batch_size: int


class SimModelRunner:
    """`config` is the scheduler's effective config (`Scheduler.config`), as for exec's runner:
    its graph sizes are capped at max_running_requests."""

    def __init__(self, cost_model: CostModel, token_source: TokenSource, config: EngineConfig,
                 model_info: ModelInfo) -> None:
        self.cost_model = cost_model
        self.token_source = token_source
        self.vocab_size = model_info.vocab_size
        self.graph_sizes = cuda_graph_batch_sizes(config)
        self.overlap = config.overlap  # steps cost max(device, CPU) under the overlap schedule
        self._decode: tuple[tuple[str, ...], np.ndarray] = ((), np.zeros(0, np.int64))

    def forward(self, forward_batch: ForwardBatch) -> RunnerOutput:
        fb = forward_batch
        graph = can_run_graph(fb, self.graph_sizes)
        padded = padded_batch_size(fb.batch_size, self.graph_sizes) if graph else fb.batch_size
        duration = self.cost_model.step_time(BatchShape.from_forward_batch(fb, padded), self.overlap)
        return RunnerOutput(fb.logit_rows, (fb.batch_size, self.vocab_size), graph=graph,
                            padded_batch_size=padded, duration=duration)

    def sample(self, output: RunnerOutput, forward_batch: ForwardBatch) -> np.ndarray:
        fb = forward_batch
        if fb.forward_mode.is_decode():
            return self.token_source.token_ids(fb.rids, self._decode_indices(fb))
        # NOTE: every request's first token is a prefill's: the source is told its parameters
        self.token_source.add_requests(fb.rids, fb.sampling_params)
        return self.token_source.token_ids(fb.rids, output_lens(fb))

    def decode_run_tokens(self, rids: tuple[str, ...], output_lens: np.ndarray, steps: int) -> np.ndarray:
        """[k, B] the ids `sample` would return over the next k <= `steps` decode steps of
        these requests (holding output_lens tokens now); k stops before a step in which the
        token source ends a request (its `finished`)."""
        k = self.token_source.steps_before_end(rids, output_lens, steps)
        return self.token_source.token_matrix(rids, output_lens, k)

    def decode_run_times(self, seq_lens: np.ndarray, steps: int) -> DecodeRunTimes:
        """What `forward` decides and prices for `steps` decode steps of a batch whose
        seq_lens ([B], the step's token included) start at `seq_lens` and grow by one per
        step; the durations are priced lazily, as the driver draws them."""
        b = len(seq_lens)
        graph = graph_fits(b, self.graph_sizes)
        padded = padded_batch_size(b, self.graph_sizes) if graph else b
        times = self.cost_model.decode_step_times(seq_lens, padded, self.overlap)
        return DecodeRunTimes(itertools.islice(times, steps), graph, padded)

    def output_indices(self, fb: ForwardBatch) -> np.ndarray:
        """[B] int64: the output index each row samples, len(output_ids).

        NOTE: in a DECODE batch seq_len = prompt_len + len(output_ids) (the input is the last
        output token), so the prompt lengths of the last decode are kept, keyed by the identity
        of its `rids` tuple (a batch keeps that tuple until its requests change; identity, not
        equality, so another run reusing rids never hits), and indices = seq_lens - prompt_lens
        while the same requests keep decoding."""
        return self._decode_indices(fb) if fb.forward_mode.is_decode() else output_lens(fb)

    def _decode_indices(self, fb: ForwardBatch) -> np.ndarray:
        """output_indices of a DECODE batch."""
        rids, prompt_lens = self._decode
        if fb.rids is not rids:
            prompt_lens = fb.seq_lens - output_lens(fb)
            self._decode = (fb.rids, prompt_lens)
        return fb.seq_lens - prompt_lens


def output_lens(fb: ForwardBatch) -> np.ndarray:
    """[B] int64 len(output_ids) per request."""
    return np.fromiter(map(len, fb.output_ids), np.int64, fb.batch_size)
