"""`Workload`: a list of requests that both executors run, and its JSONL file.

The generators (`shared.workload.registry.GENERATORS`, one file each) draw workloads from a
seed; a workload can also be built from requests directly. Its `requests` are a tuple, or a
`SortedRequests`: a read-only sequence already in arrival order with unique rids, which the
workload keeps as it is (`shared.workload.generated_requests`: made on access, so a million
requests need not all be held). `FollowUp` is a turn sent only
after the reply to an earlier one (closed-loop conversations, `shared.workload.sessions`):
the driver materialises it when that turn finishes normally (`request(...)`, at the reply's
time: the end of the step that sampled its last token); a turn that ends otherwise
(aborted, refused) ends its conversation.

JSONL file: line 1 is a header `{"format": "batchtwin-workload", "version": 1, "name",
"config"}`, then one request per line (`rid, arrival_time, input_ids, sampling_params`),
then the follow-ups (`rid, after, think_time, user_ids, sampling_params`). `config` holds
the generator's name and parameters (seed included) as JSON values; it goes through JSON at
construction so a saved and reloaded workload compares equal.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shared.request.invalid_request import InvalidRequestError
from shared.request.req import Req
from shared.request.sampling_params import SamplingParams
from shared.request.validation import token_array

WORKLOAD_FORMAT = "batchtwin-workload"
WORKLOAD_VERSION = 1


@dataclass(frozen=True)
class WorkloadRequest:
    """One request: arrival in seconds from 0, a non-empty prompt, its sampling parameters."""

    rid: str
    arrival_time: float
    input_ids: tuple[int, ...]
    sampling_params: SamplingParams
    _input_array: np.ndarray = field(init=False, repr=False, compare=False)  # [P] int64, read-only

    def __post_init__(self) -> None:
        try:  # NOTE: ints only (never int()-cast: 1.5 or True are refused, naming the token)
            array = token_array(self.input_ids).astype(np.int64)
        except InvalidRequestError as e:
            raise InvalidRequestError(e.field, e.value, f"request {self.rid!r}: {e.reason}") from None
        if not array.size:
            raise InvalidRequestError("input_ids", [], f"request {self.rid!r}: the prompt is empty")
        array.flags.writeable = False
        object.__setattr__(self, "input_ids", tuple(array.tolist()))
        object.__setattr__(self, "_input_array", array)
        if not (math.isfinite(self.arrival_time) and self.arrival_time >= 0):
            raise ValueError(f"request {self.rid!r}: arrival_time must be finite and >= 0, "
                             f"got {self.arrival_time!r}")

    def to_req(self) -> Req:
        return Req(self.rid, self.input_ids, self.sampling_params, arrival_time=self.arrival_time,
                   prompt_array=self._input_array)

    def to_dict(self) -> dict[str, Any]:
        return {"rid": self.rid, "arrival_time": self.arrival_time,
                "input_ids": list(self.input_ids),
                "sampling_params": self.sampling_params.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkloadRequest:
        return cls(d["rid"], float(d["arrival_time"]), tuple(d["input_ids"]),
                   SamplingParams.from_dict(d["sampling_params"]))


@dataclass(frozen=True)
class FollowUp:
    """A turn not sent yet: the rid of the turn it answers, the think time, its user message
    and sampling parameters (module doc)."""

    rid: str
    after: str                      # the turn whose reply this one waits for
    think_time: float               # seconds from that reply to this turn's arrival
    user_ids: tuple[int, ...]
    sampling_params: SamplingParams

    def __post_init__(self) -> None:
        if not (math.isfinite(self.think_time) and self.think_time >= 0):
            raise ValueError(f"follow-up {self.rid!r}: think_time must be finite and >= 0 s, "
                             f"got {self.think_time!r}")

    def request(self, prompt: Sequence[int], reply: Sequence[int],
                reply_time: float) -> WorkloadRequest:
        """The turn, sent `think_time` after `reply_time`, re-sending prompt + reply."""
        return WorkloadRequest(self.rid, reply_time + self.think_time,
                               (*prompt, *reply, *self.user_ids), self.sampling_params)

    def to_dict(self) -> dict[str, Any]:
        return {"rid": self.rid, "after": self.after, "think_time": self.think_time,
                "user_ids": list(self.user_ids),
                "sampling_params": self.sampling_params.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FollowUp:
        return cls(d["rid"], d["after"], float(d["think_time"]), tuple(d["user_ids"]),
                   SamplingParams.from_dict(d["sampling_params"]))


class SortedRequests(Sequence[WorkloadRequest], ABC):
    """Requests in arrival order with unique rids, that says whether it holds a rid without
    reading its requests. A workload takes one as it is: neither sorted nor read."""

    @abstractmethod
    def has_rid(self, rid: str) -> bool: ...

    def stand_ins(self) -> tuple[WorkloadRequest, ...] | None:
        """A few requests that a request check refuses one of whenever it refuses any of
        these requests, or None (the default: check each one). The kind of check they stand
        in for is the maker's contract (`GeneratedRequests.stand_ins`)."""
        return None

    def arrival_times(self) -> np.ndarray:
        """[n] every request's arrival (s), in order; the default reads each request."""
        return np.fromiter((r.arrival_time for r in self), np.float64, len(self))


def arrival_times(requests: Sequence[WorkloadRequest]) -> np.ndarray:
    """[n] the arrival (s) of each of `requests`, without making them where they are made on
    access (`SortedRequests.arrival_times`)."""
    if isinstance(requests, SortedRequests):
        return requests.arrival_times()
    return np.fromiter((r.arrival_time for r in requests), np.float64, len(requests))


@dataclass(frozen=True)
class Workload:
    """Requests sorted by arrival time (stable: ties keep the given order), unique rids, and
    the follow-up turns sent only after a reply (`FollowUp`: each answers a request or an
    earlier follow-up). `len` counts both. Equal workloads have equal requests, element by
    element, whether held in a tuple or made on access."""

    requests: Sequence[WorkloadRequest]
    name: str = "workload"
    config: dict[str, Any] = field(default_factory=dict)
    followups: tuple[FollowUp, ...] = ()

    def __post_init__(self) -> None:
        # NOTE: normalisation at construction only (sorted requests, JSON-shaped config). A
        # SortedRequests is kept unread: its maker guarantees the order and unique rids.
        reqs = self.requests
        if not isinstance(reqs, SortedRequests):
            reqs = tuple(sorted(reqs, key=lambda r: r.arrival_time))
        _check_rids(self.name, reqs, self.followups)
        object.__setattr__(self, "requests", reqs)
        object.__setattr__(self, "followups", tuple(self.followups))
        object.__setattr__(self, "config", json.loads(json.dumps(self.config)))

    def __len__(self) -> int:
        return len(self.requests) + len(self.followups)

    def __iter__(self) -> Iterator[WorkloadRequest]:
        return iter(self.requests)

    def to_reqs(self) -> list[Req]:
        return [r.to_req() for r in self.requests]

    def to_jsonl(self, path: str | Path) -> None:
        header = {"format": WORKLOAD_FORMAT, "version": WORKLOAD_VERSION,
                  "name": self.name, "config": self.config}
        with open(path, "w") as f:
            f.write(json.dumps(header) + "\n")
            for r in self.requests:
                f.write(json.dumps(r.to_dict()) + "\n")
            for u in self.followups:
                f.write(json.dumps(u.to_dict()) + "\n")

    @classmethod
    def from_jsonl(cls, path: str | Path) -> Workload:
        """The workload `to_jsonl` wrote; ValueError naming the file (and the line) when it
        is not one: a wrong header, a line that is not JSON, a request missing a field."""
        with open(path) as f:
            header = _parse_line(path, 1, f.readline() or "{}", dict)
            if header.get("format") != WORKLOAD_FORMAT or header.get("version") != WORKLOAD_VERSION:
                raise ValueError(f"{path}: not a {WORKLOAD_FORMAT} v{WORKLOAD_VERSION} file "
                                 f"(header format={header.get('format')!r}, "
                                 f"version={header.get('version')!r})")
            lines = [_parse_line(path, n, ln, _request_or_followup)
                     for n, ln in enumerate(f, start=2) if ln.strip()]
        missing = [key for key in ("name", "config") if key not in header]
        if missing:
            raise ValueError(f"workload file {path} line 1 is not a batchtwin workload header "
                             f"(missing field {missing[0]!r})")
        reqs = tuple(x for x in lines if isinstance(x, WorkloadRequest))
        later = tuple(x for x in lines if not isinstance(x, WorkloadRequest))
        return cls(reqs, header["name"], header["config"], later)


def _check_rids(name: str, requests: Sequence[WorkloadRequest],
                followups: Sequence[FollowUp]) -> None:
    """ValueError unless every rid is unique and each follow-up answers another request."""
    listed = requests.has_rid if isinstance(requests, SortedRequests) else None
    seen: set[str] = set()
    request_rids = [] if listed else [r.rid for r in requests]
    for rid in request_rids + [f.rid for f in followups]:
        if rid in seen or (listed and listed(rid)):
            raise ValueError(f"workload {name!r}: duplicate rid {rid!r} "
                             f"(request ids must be unique)")
        seen.add(rid)
    for f in followups:
        if (f.after not in seen and not (listed and listed(f.after))) or f.after == f.rid:
            raise ValueError(f"workload {name!r}: follow-up {f.rid!r} answers "
                             f"{f.after!r}, which is not another request of the workload")


def _request_or_followup(d: dict) -> Any:
    """A request line, or a follow-up turn's (it names the turn it answers: `after`)."""
    if "after" in d:
        return FollowUp.from_dict(d)
    return WorkloadRequest.from_dict(d)


def _parse_line(path: str | Path, number: int, line: str, build: Callable[[dict], Any]) -> Any:
    """`build(json.loads(line))`; ValueError naming the file and line when the line is not a
    JSON object or lacks a field `build` needs."""
    try:
        value = json.loads(line)
        if not isinstance(value, dict):
            raise TypeError(f"a JSON object, got {type(value).__name__}")
        return build(value)
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(f"workload file {path} line {number} is not a batchtwin workload "
                         f"line ({what})") from None
