"""`GeneratedRequests`: a generator's independent requests as a read-only sequence that holds
only their scalars and makes the `WorkloadRequest`s when they are read.

Contract: request i is `WorkloadRequest(f"r{i}", float(arrivals[i]), prompts.tokens(i, i+1),
request_params(template, int(output_lens[i])))`, the request an eager build makes from the
same draws, so a workload of them equals (`==`, element by element) the workload of the
eager tuple. Arrivals are non-decreasing and rids are `r0 .. r{n-1}`, so the sequence is a
`SortedRequests` (`Workload` takes it as it is). Indexing, slicing (a tuple) and iteration
make requests a chunk of `chunk` at a time; indexing keeps the last chunk made, so reading
in order (`reqs[i]`, `reqs[a:b]`: the simulator's arrival cursor) makes each chunk once, and
iteration makes its own chunks. Memory: four [n] / [n + 1] numbers per request, a chunk
and one `SamplingParams` per distinct output length (shared by its requests: immutable).

`stand_ins()` lets a check of every request (the scheduler's, before a run) read a few
made-up requests instead of all n: for each output length, its shortest and longest prompt
made of the largest token id the stream can draw (module doc of `stand_ins`).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from shared.request.sampling_params import SamplingParams
from shared.workload.draw import request_params
from shared.workload.token_stream import TokenStream
from shared.workload.workload import SortedRequests, WorkloadRequest

CHUNK_REQUESTS = 1024   # requests made at a time (~300k tokens for ShareGPT-like prompts)


class GeneratedRequests(SortedRequests):
    """Requests `r0 .. r{n-1}` drawn by a generator, made on access (module doc)."""

    def __init__(self, arrivals: np.ndarray, output_lens: np.ndarray, prompts: TokenStream,
                 template: SamplingParams | None, chunk: int = CHUNK_REQUESTS) -> None:
        if not len(arrivals) == len(output_lens) == len(prompts):
            raise ValueError(f"{len(arrivals)} arrivals, {len(output_lens)} output lengths "
                             f"and {len(prompts)} prompts: one each per request")
        if np.any(np.diff(arrivals) < 0):
            raise ValueError("generated arrivals must be in order")
        self.arrivals = np.asarray(arrivals, dtype=np.float64)       # [n] s
        self.output_lens = np.asarray(output_lens, dtype=np.int64)   # [n]
        self.prompts, self.template, self.chunk = prompts, template, chunk
        self.params = {m: request_params(template, m)    # output length -> its requests' params
                       for m in np.unique(self.output_lens).tolist()}
        self._cached: tuple[int, tuple[WorkloadRequest, ...]] = (-1, ())   # chunk k, its requests

    def __len__(self) -> int:
        return len(self.arrivals)

    @overload
    def __getitem__(self, i: int) -> WorkloadRequest: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[WorkloadRequest, ...]: ...

    def __getitem__(self, i: int | slice) -> WorkloadRequest | tuple[WorkloadRequest, ...]:
        if isinstance(i, slice):
            return tuple(self._item(j) for j in range(*i.indices(len(self))))
        j = operator.index(i)
        if not -len(self) <= j < len(self):
            raise IndexError(f"request index {i} out of range for {len(self)} requests")
        return self._item(j % len(self))

    def __iter__(self) -> Iterator[WorkloadRequest]:
        for k in range(0, len(self), self.chunk):
            yield from self._make(k, min(k + self.chunk, len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GeneratedRequests) and self._same_draws(other):
            return True
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None   # type: ignore[assignment]  # NOTE: equal to tuples, which hash by value

    def __repr__(self) -> str:
        return f"GeneratedRequests({len(self)} requests, vocab_size={self.prompts.vocab_size})"

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cached": (-1, ())}

    def arrival_times(self) -> np.ndarray:
        return self.arrivals

    def has_rid(self, rid: str) -> bool:
        digits = rid[1:]
        return (rid[:1] == "r" and digits.isascii() and digits.isdigit() and str(int(digits)) == digits
                and int(digits) < len(self))

    def stand_ins(self) -> tuple[WorkloadRequest, ...] | None:
        """For each output length, its requests of the shortest and of the longest prompt,
        every prompt token replaced by `vocab_size - 1`, the largest id the stream draws
        (rids and arrivals kept); None when a prompt is empty (check each request).

        NOTE: every request's tokens lie in [0, vocab_size) by construction, so a check that
        refuses a request only by its parameters, by its largest token id and by its prompt
        length lying outside an interval that depends on the parameters (the scheduler's
        `check_request`, `shared.request.validation`: at least the parameters'
        logprob_start_len, below the context and KV limits less max_new_tokens) refuses a
        stand-in whenever it refuses any request: requests of one output length share their
        parameters, and their prompt lengths lie between the two stand-ins'."""
        lens = np.diff(self.prompts.token_starts)                   # [n] prompt lengths
        if not len(lens) or lens.min() < 1:
            return None
        order = np.lexsort((lens, self.output_lens))   # [n] by output length, then prompt length
        outs = self.output_lens[order]
        first = np.flatnonzero(np.concatenate([[True], outs[1:] != outs[:-1]]))   # group starts
        ends = np.concatenate([first[1:], [len(order)]]) - 1                     # group ends
        top = self.prompts.vocab_size - 1
        return tuple(WorkloadRequest(f"r{i}", float(self.arrivals[i]), np.full(int(lens[i]), top),
                                     self.params[int(self.output_lens[i])])
                     for i in np.unique(order[np.concatenate([first, ends])]).tolist())

    def _item(self, i: int) -> WorkloadRequest:
        k = i // self.chunk
        if self._cached[0] != k:
            a = k * self.chunk
            self._cached = (k, self._make(a, min(a + self.chunk, len(self))))
        return self._cached[1][i - k * self.chunk]

    def _make(self, a: int, b: int) -> tuple[WorkloadRequest, ...]:
        """Requests a .. b-1."""
        ids = self.prompts.tokens(a, b)                           # [sum of their lengths] int64
        cuts = (self.prompts.token_starts[a:b + 1] - self.prompts.token_starts[a]).tolist()
        arrivals, outs = self.arrivals[a:b].tolist(), self.output_lens[a:b].tolist()
        params = self.params
        return tuple(WorkloadRequest(f"r{a + j}", arrivals[j], ids[cuts[j]:cuts[j + 1]],
                                     params[outs[j]])
                     for j in range(b - a))

    def _same_draws(self, other: GeneratedRequests) -> bool:
        return (self.prompts.same_stream(other.prompts) and self.template == other.template
                and np.array_equal(self.arrivals, other.arrivals)
                and np.array_equal(self.output_lens, other.output_lens))
