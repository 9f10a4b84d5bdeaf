"""`Trace`: a run's step records plus everything needed to replay it, as JSONL.

Line 1 is a header: format and version, the effective EngineConfig, ModelInfo, the
model's config.json, the executor (device or hardware key) and every request (arrival,
prompt, sampling parameters, final output length, finish reason, timings). Then one line
per StepRecord. A trace file alone is enough to replay a run.

NOTE: the scheduler appends steps as `StepValues` (StepRecord's fields by name, in its order
`STEP_FIELDS`, arrays as numpy arrays); they become `StepRecord`s (tuples of ints) when
`steps` is first read after an append. That keeps the per-step cost and the memory of a
long simulation small.
"""

from __future__ import annotations

import dataclasses
import json
import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from shared.config.engine_config import EngineConfig, ModelInfo
from shared.request.finish_reason import FinishReason
from shared.request.sampling_params import SamplingParams
from shared.trace.decode_block import DecodeBlock
from shared.trace.step_record import StepRecord, StepValues

STEP_FIELDS = tuple(f.name for f in dataclasses.fields(StepRecord))
_FIELD_INDEX = MappingProxyType({name: i for i, name in enumerate(STEP_FIELDS)})
_FIELD_DEFAULTS = MappingProxyType({f.name: f.default for f in dataclasses.fields(StepRecord)})
TRACE_FORMAT = "batchtwin-trace"
TRACE_VERSION = 2  # 2: EngineConfig.disable_overlap_schedule, StepRecord.overlap_rows


@dataclass
class RequestRecord:
    """One request of a run, as the scheduler saw it (times in seconds, NaN if never).

    `output_ids` are all its outputs, `prebuilt_output_ids` the first of them when it
    arrived with outputs already produced elsewhere (`Scheduler.add_request`: SGLang's
    PREBUILT path, a disaggregated decode instance receiving the prefill's first token);
    its `first_token_time` is then its arrival."""

    rid: str
    arrival_time: float
    input_ids: tuple[int, ...]
    sampling_params: SamplingParams
    output_len: int = 0
    finish_reason: FinishReason | None = None
    first_token_time: float = float("nan")
    finish_time: float = float("nan")
    cached_tokens: int = 0
    num_retractions: int = 0
    output_ids: tuple[int, ...] = ()
    prebuilt_output_ids: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "rid": self.rid, "arrival_time": self.arrival_time, "input_ids": list(self.input_ids),
            "sampling_params": self.sampling_params.to_dict(), "output_len": self.output_len,
            "finish_reason": self.finish_reason.to_dict() if self.finish_reason else None,
            "first_token_time": _json_float(self.first_token_time),
            "finish_time": _json_float(self.finish_time), "cached_tokens": self.cached_tokens,
            "num_retractions": self.num_retractions, "output_ids": list(self.output_ids),
            "prebuilt_output_ids": list(self.prebuilt_output_ids),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        fr = d.get("finish_reason")
        return cls(
            d["rid"], d["arrival_time"], tuple(d["input_ids"]),
            SamplingParams.from_dict(d["sampling_params"]), d["output_len"],
            FinishReason.from_dict(fr) if fr else None, _nan(d["first_token_time"]),
            _nan(d["finish_time"]), d["cached_tokens"], d["num_retractions"],
            tuple(d.get("output_ids", ())), tuple(d.get("prebuilt_output_ids", ())))


class TraceHeader(NamedTuple):
    """What a trace says of its run besides the engine config and model info, given to the
    Scheduler when it is built: the model's config.json and the executor's description
    (kind, device or hardware, tp, cost model, ...; JSON-ready)."""

    model_config: Mapping[str, Any] = MappingProxyType({})
    executor: Mapping[str, Any] = MappingProxyType({})


@dataclass
class Trace:
    engine_config: EngineConfig
    model_info: ModelInfo
    model_config: dict[str, Any] = field(default_factory=dict)
    executor: dict[str, Any] = field(default_factory=dict)
    requests: dict[str, RequestRecord] = field(default_factory=dict)
    _steps: list[StepRecord] = field(default_factory=list, repr=False)
    _pending: list[tuple] = field(default_factory=list, repr=False)  # values in STEP_FIELDS order
    keeps_steps = True   # every step is kept whole (`StepRecorder`)
    copies_prompts = True   # a record holds its prompt as a tuple of its own (`Scheduler`)

    @property
    def steps(self) -> list[StepRecord]:
        if self._pending:
            self._steps.extend(step_record_of(p) for p in self._pending)
            self._pending.clear()
        return self._steps

    def step_fields(self, *names: str) -> list[tuple]:
        """Per step, the named fields as stored, without building StepRecords: tuples for
        steps already read, numpy arrays for steps appended since (cheap for long runs)."""
        if len(names) < 2:
            raise ValueError("step_fields needs at least two field names")
        return (list(map(operator.attrgetter(*names), self._steps))
                + list(map(operator.itemgetter(*map(_FIELD_INDEX.__getitem__, names)), self._pending)))

    def step_columns(self, *names: str) -> list[list]:
        """Per named field, its value in every step (as step_fields stores them), one list
        per field: a column-wise step_fields."""
        return [list(map(operator.attrgetter(name), self._steps))
                + list(map(operator.itemgetter(_FIELD_INDEX[name]), self._pending)) for name in names]

    def add_request(self, record: RequestRecord) -> None:
        """A submitted request's record (updated in place as it runs)."""
        self.requests[record.rid] = record

    def unfinished(self) -> list[str]:
        """The rids of the requests with no finish reason."""
        return [rid for rid, r in self.requests.items() if r.finish_reason is None]

    def append_step(self, **fields: Any) -> None:
        """Record one step by field name (StepRecord's defaults fill the rest); array fields
        may be numpy arrays (converted when read)."""
        self._pending.append(tuple(fields[n] if n in fields else _FIELD_DEFAULTS[n] for n in STEP_FIELDS))

    def append_step_values(self, values: StepValues) -> None:
        """Record one step, its fields by name (`StepValues`)."""
        self._pending.append(values)

    def append_steps_values(self, steps: list[StepValues]) -> None:
        """Record steps (`StepValues`), in order."""
        self._pending.extend(steps)

    def append_decode_block(self, block: DecodeBlock) -> None:
        """Record a decode run's steps (`DecodeBlock`), in order."""
        self._pending.extend(block.steps())

    def __iter__(self) -> Iterator[StepRecord]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self._steps) + len(self._pending)

    def select(self, rids: list[str], first_step: int = 0, t0: float = 0.0) -> Trace:
        """A trace of these requests and the steps from `first_step` on (one run of an
        engine whose trace spans several), every time measured from `t0` (the run's start:
        arrivals then read as the workload's)."""
        requests = {rid: self.requests[rid] for rid in rids}
        steps = list(self.steps[first_step:])
        if t0:
            requests = {rid: dataclasses.replace(
                r, arrival_time=r.arrival_time - t0, first_token_time=r.first_token_time - t0,
                finish_time=r.finish_time - t0) for rid, r in requests.items()}
            steps = [dataclasses.replace(st, start_time=st.start_time - t0) for st in steps]
        return Trace(self.engine_config, self.model_info, self.model_config, self.executor,
                     requests, steps)

    def header(self) -> dict[str, Any]:
        return {
            "format": TRACE_FORMAT, "version": TRACE_VERSION,
            "engine_config": self.engine_config.to_dict(), "model_info": self.model_info.to_dict(),
            "model_config": self.model_config, "executor": self.executor,
            "requests": [r.to_dict() for r in self.requests.values()],
        }

    def save(self, path: str | Path) -> None:
        with open(path, "w") as f:
            f.write(json.dumps(self.header()) + "\n")
            for s in self.steps:
                f.write(json.dumps(s.to_dict()) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        """Read a trace file; a malformed line raises ValueError naming the file and line."""
        with open(path) as f:
            lines = f.readlines()
        header = _parse(path, 1, lines[0] if lines else "", _header)
        steps = [_parse(path, i, line, lambda d: StepRecord.from_dict(d))
                 for i, line in enumerate(lines[1:], start=2) if line.strip()]
        return cls(*header, steps)

    def to_dataframe(self):
        """One row per step: every StepRecord field plus batch_size and num_tokens."""
        import pandas as pd

        df = pd.DataFrame([s.to_dict() for s in self.steps])
        if len(df):
            df["batch_size"] = df["rids"].map(len)
            df["num_tokens"] = df["input_ids"].map(len)
        return df


def _parse(path: str | Path, lineno: int, line: str, build):
    try:
        return build(json.loads(line))
    except (ValueError, KeyError, TypeError) as e:
        what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(f"{path}, line {lineno}: malformed trace line ({what})") from None


def _header(d: dict[str, Any]) -> tuple:
    if d.get("format") != TRACE_FORMAT or d.get("version") not in (1, TRACE_VERSION):
        raise ValueError(f"not a {TRACE_FORMAT} v1 or v{TRACE_VERSION} header "
                         f"(format={d.get('format')!r}, version={d.get('version')!r})")
    reqs = [RequestRecord.from_dict(r) for r in d["requests"]]
    config = dict(d["engine_config"])
    if d["version"] == 1:  # NOTE: v1 traces predate the overlap schedule: they ran without it
        config.setdefault("disable_overlap_schedule", True)
    return (EngineConfig.from_dict(config), ModelInfo.from_dict(d["model_info"]),
            d["model_config"], d["executor"], {r.rid: r for r in reqs})


def step_record_of(values: tuple) -> StepRecord:
    return StepRecord(*[tuple(v.tolist()) if isinstance(v, np.ndarray) else v for v in values])


def _json_float(x: float) -> float | None:
    return None if x != x else x


def _nan(x: float | None) -> float:
    return float("nan") if x is None else x
