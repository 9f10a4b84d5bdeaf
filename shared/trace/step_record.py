"""`StepRecord`: one row per forward, what both executors must agree on (ARCHITECTURE §6)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

INT_TUPLE_FIELDS = (
    "input_ids", "positions", "out_cache_loc", "req_pool_indices", "seq_lens",
    "extend_prefix_lens", "extend_seq_lens", "extend_start_loc", "extend_logprob_start_lens",
    "pruned_rows", "sample_indices", "next_token_ids", "overlap_rows",
)


SHAPE_FIELDS = ("forward_mode", "seq_lens", "extend_prefix_lens", "pruned_rows",
                "padded_batch_size", "input_ids")   # what pricing a recorded step reads


class StepValues(NamedTuple):
    """A step as the scheduler records it (`Trace.append_step_values`): StepRecord's fields
    by name, in its order, arrays as numpy arrays (StepRecord holds tuples of ints)."""

    step: int
    forward_mode: str
    rids: tuple[str, ...]
    input_ids: Any
    positions: Any
    out_cache_loc: Any
    req_pool_indices: Any
    seq_lens: Any
    extend_prefix_lens: Any
    extend_seq_lens: Any
    extend_start_loc: Any
    extend_logprob_start_lens: Any
    pruned_rows: Any
    sample_indices: Any
    next_token_ids: Any
    graph: bool
    padded_batch_size: int
    start_time: float
    duration: float
    queue_len: int = 0
    kv_used_tokens: int = 0
    overlap_rows: Any = ()

    @property
    def num_steps(self) -> int:
        return 1

    def steps(self) -> tuple[StepValues]:
        """As `DecodeBlock.steps`: this step alone."""
        return (self,)

    def shape_columns(self) -> tuple[list[list], list[float]]:
        """As `DecodeBlock.shape_columns`: this step's SHAPE_FIELDS and duration."""
        return one_step_shape(self)

    def token_columns(self) -> tuple[tuple, Any, tuple[float], tuple[float]]:
        """As `DecodeBlock.token_columns`: this step's rids, ids, start time and duration."""
        return (self.rids,), self.next_token_ids, (self.start_time,), (self.duration,)


class TokenStep(NamedTuple):
    """What a log that keeps no steps (`RunLog.keeps_steps` False) reads of a step: its rids,
    the ids kept (-1: discarded), its start time and duration, and what pricing it reads
    (SHAPE_FIELDS), as StepValues holds them."""

    rids: tuple[str, ...]
    next_token_ids: Any
    start_time: float
    duration: float
    forward_mode: str
    seq_lens: Any
    extend_prefix_lens: Any
    pruned_rows: Any
    padded_batch_size: int
    input_ids: Any

    @property
    def num_steps(self) -> int:
        return 1

    def token_columns(self) -> tuple[tuple, Any, tuple[float], tuple[float]]:
        """As `StepValues.token_columns`."""
        return (self.rids,), self.next_token_ids, (self.start_time,), (self.duration,)

    def shape_columns(self) -> tuple[list[list], list[float]]:
        """As `StepValues.shape_columns`."""
        return one_step_shape(self)


def one_step_shape(step: StepValues | TokenStep) -> tuple[list[list], list[float]]:
    """A recorded step's SHAPE_FIELDS, one list each, and its duration."""
    return ([[step.forward_mode], [step.seq_lens], [step.extend_prefix_lens], [step.pruned_rows],
             [step.padded_batch_size], [step.input_ids]], [step.duration])


class FieldDiff(NamedTuple):
    field: str
    left: Any
    right: Any


@dataclass(frozen=True)
class StepRecord:
    """Fields are tuples of ints unless noted. The four extend fields are empty on DECODE
    steps; `next_token_ids` holds -1 for a discarded row: an intermediate prefill chunk, or
    (under the overlap schedule) a request that finished or was retracted before this
    step's result was processed, whose rows `overlap_rows` lists. `queue_len` and
    `kv_used_tokens` observe the scheduler when the step's result was processed (waiting
    requests, KV slots taken by requests or the cache); under overlap, when it launched."""

    step: int
    forward_mode: str
    rids: tuple[str, ...]
    input_ids: tuple[int, ...]
    positions: tuple[int, ...]
    out_cache_loc: tuple[int, ...]
    req_pool_indices: tuple[int, ...]
    seq_lens: tuple[int, ...]
    extend_prefix_lens: tuple[int, ...]
    extend_seq_lens: tuple[int, ...]
    extend_start_loc: tuple[int, ...]
    extend_logprob_start_lens: tuple[int, ...]
    pruned_rows: tuple[int, ...]
    sample_indices: tuple[int, ...]
    next_token_ids: tuple[int, ...]
    graph: bool
    padded_batch_size: int
    start_time: float
    duration: float
    queue_len: int = 0
    kv_used_tokens: int = 0
    overlap_rows: tuple[int, ...] = ()

    @property
    def batch_size(self) -> int:
        return len(self.rids)

    def diff(self, other: StepRecord, ignore: tuple[str, ...] = ("start_time", "duration")
             ) -> FieldDiff | None:
        """The first field (in declaration order) where the two records differ, or None."""
        for f in dataclasses.fields(self):
            if f.name not in ignore and getattr(self, f.name) != getattr(other, f.name):
                return FieldDiff(f.name, getattr(self, f.name), getattr(other, f.name))
        return None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepRecord:
        d = dict(d)
        d["rids"] = tuple(d["rids"])
        d.setdefault("overlap_rows", ())  # NOTE: absent from v1 traces
        for name in INT_TUPLE_FIELDS:
            d[name] = tuple(d[name])
        return cls(**d)
