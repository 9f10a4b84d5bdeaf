"""`RunLog`: what a lean run keeps, in memory that follows what was asked to be kept, not
the length of the run. It takes what the scheduler writes into a `Trace` (the same calls:
`add_request`, `append_step_values`, `append_steps_values`, `append_decode_block`, `len`,
`requests`), and keeps:

- every request as a row of a `RequestTable` (times, lengths, finish reason; no token ids),
  its `RequestRecord` object held only while it runs;
- the inter-token gaps of its requests (`TokenGaps`: exact up to a limit, then a sketch);
- with `keep_steps`, one row per step of the run's `.steps` table (`StepTable`);
- with `step_bounds` (a pricer), the step time each bound took (`bound_seconds`);
- with `trace_file`, nothing more: the trace goes to that file as the run goes (`TraceWriter`).

Steps are held as the scheduler appends them (a decode run as one `DecodeBlock`, expanded
into steps only for the step table or a trace file; without those, a single step as the
`TokenStep` that the gaps and the bounds read) and folded in chunks of at least
`chunk_steps` steps: their token times go to the gaps, their bounds to `bound_seconds`,
their rows to the step table, and the records of requests finished by then become table
rows. Nothing else of a step or a finished request stays. `shared.trace.log_result` reads
it (after `finish`) as `RunResult.from_trace` reads a Trace, with the same numbers
(`shared.trace.token_gaps` says when the ITL percentiles are sketched).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shared.config.engine_config import EngineConfig, ModelInfo
from shared.trace.decode_block import DecodeBlock
from shared.trace.request_table import RequestTable
from shared.trace.step_record import SHAPE_FIELDS, StepValues, TokenStep
from shared.trace.step_table import StepTable
from shared.trace.token_gaps import EXACT_LIMIT, TokenGaps
from shared.trace.trace import RequestRecord, Trace
from shared.trace.trace_writer import TraceWriter

CHUNK_STEPS = 2048
COMPLETED_FINISH_TYPES = ("length", "stop")
_TOKEN_COLUMNS = operator.methodcaller("token_columns")

# each step's bound from the steps' SHAPE_FIELDS columns (sim.cost.step_bounds.chunk_bounds)
StepPricer = Callable[[list[list]], list[str]]


@dataclass(frozen=True)
class Keep:
    """What a run keeps (`Scheduler(keep=...)`). `trace`: every step and request record, a
    `Trace` (replayable; what `--save-trace` writes); else a `RunLog`, with `steps` its step
    table, whose `bound` column `step_bounds` fills (None: "": no bound time either), folding its steps every
    `chunk_steps` and holding up to `exact_gaps` inter-token gaps exactly (`TokenGaps`);
    `trace_file`: where the run's trace goes, a RunLog writing it as the run goes
    (`TraceWriter`); a kept Trace is saved there by whoever runs it, at the end."""

    trace: bool = True
    steps: bool = False
    step_bounds: StepPricer | None = None
    chunk_steps: int = CHUNK_STEPS
    exact_gaps: int = EXACT_LIMIT
    trace_file: str | Path | None = None

    def new_log(self, config: EngineConfig, model_info: ModelInfo, model_config: dict[str, Any],
                executor: dict[str, Any]) -> Trace | RunLog:
        if self.trace:
            return Trace(config, model_info, model_config, executor)
        return RunLog(config, model_info, model_config, executor, keep_steps=self.steps,
                      step_bounds=self.step_bounds, chunk_steps=self.chunk_steps,
                      exact_gaps=self.exact_gaps, trace_file=self.trace_file)


FULL_TRACE = Keep()   # the default: every record (a frozen value, shared read-only)


class RunLog:
    def __init__(self, engine_config: EngineConfig, model_info: ModelInfo,
                 model_config: dict[str, Any] | None = None, executor: dict[str, Any] | None = None,
                 *, keep_steps: bool = False, step_bounds: StepPricer | None = None,
                 chunk_steps: int = CHUNK_STEPS, exact_gaps: int = EXACT_LIMIT,
                 trace_file: str | Path | None = None) -> None:
        self.engine_config, self.model_info = engine_config, model_info
        self.model_config, self.executor = model_config or {}, executor or {}
        self.table = RequestTable()
        self.gaps = TokenGaps(exact_gaps)
        self.steps_table = StepTable() if keep_steps else None
        self.step_bounds = step_bounds
        self.bound_seconds: dict[str, float] = {}   # step time per bound (with step_bounds)
        self.requests = LogRequests(self.table)
        self.chunk_steps = chunk_steps
        self._pending: list[StepValues | DecodeBlock | TokenStep] = []
        self._pending_steps = 0   # steps in _pending (a block holds several)
        self._folded = 0
        self.writer = None if trace_file is None else TraceWriter(
            trace_file, engine_config, model_info, self.model_config, self.executor)

    def add_request(self, record: RequestRecord) -> None:
        """A submitted request; `record` is its live record until it finished."""
        row = self.table.add(record)
        self.requests.live[record.rid] = record
        if record.prebuilt_output_ids:
            self.gaps.start_from(row, record.first_token_time)

    def append_step_values(self, values: StepValues) -> None:
        self._hold([values], 1)

    def append_steps_values(self, steps: list[StepValues]) -> None:
        self._hold(steps, len(steps))

    def append_decode_block(self, block: DecodeBlock) -> None:
        self._hold([block], block.num_steps)

    def append_token_step(self, step: TokenStep) -> None:
        """A step as a log that keeps no steps reads it (only while not keeps_steps)."""
        self._hold([step], 1)

    copies_prompts = False   # a live record may read its request's prompt list (`Scheduler`)

    @property
    def keeps_steps(self) -> bool:
        """Whether the log reads whole steps (a step table or a trace file); else the
        recorder may hand it TokenSteps (they hold what bounds are priced from)."""
        return self.steps_table is not None or self.writer is not None

    def _hold(self, items: list[StepValues | DecodeBlock | TokenStep], steps: int) -> None:
        self._pending += items
        self._pending_steps += steps
        if self._pending_steps >= self.chunk_steps:
            self.fold()

    def __len__(self) -> int:
        return self._folded + self._pending_steps

    def finish(self) -> None:
        """Fold what is held and write the trace file, if any (once the run ended, before
        reading the log; again: no effect)."""
        self.fold()
        if self.writer is not None:
            for record in self.requests.live.values():   # NOTE: never finished
                self.writer.request(self.table.row_of(record.rid), record)
            self.writer.close(len(self.table))
            self.writer = None

    def fold(self) -> None:
        """Take the held steps into the gaps and the step table, and the finished requests'
        records into the request table."""
        chunk, self._pending = self._pending, []
        self._folded += self._pending_steps
        self._pending_steps = 0
        if chunk:
            self.gaps.add(*self._token_rows(chunk))
            bounds = self._bounds(chunk)
            if self.keeps_steps:
                self._add_steps([step for item in chunk for step in item.steps()], bounds)
        self._retire_finished()

    def _add_steps(self, steps: list[StepValues], bounds: list[str] | None) -> None:
        if self.writer is not None:
            self.writer.steps(steps)
        if self.steps_table is not None:
            self.steps_table.add(steps, bounds)

    def _bounds(self, chunk: list[StepValues | DecodeBlock | TokenStep]) -> list[str] | None:
        """Each step's bound, step after step (None without step_bounds), its time added to
        bound_seconds."""
        if self.step_bounds is None:
            return None
        columns: list[list] = [[] for _ in SHAPE_FIELDS]
        durations: list[float] = []
        for item in chunk:
            shape, times = item.shape_columns()
            for column, part in zip(columns, shape, strict=True):
                column += part
            durations += times
        bounds = self.step_bounds(columns)
        for bound, duration in zip(bounds, durations, strict=True):
            if bound:
                self.bound_seconds[bound] = self.bound_seconds.get(bound, 0.0) + duration
        return bounds

    def unfinished(self) -> list[str]:
        """The rids of the requests with no finish reason (after `finish`)."""
        return [rid for rid, r in self.requests.live.items() if r.finish_reason is None]

    def completed(self) -> np.ndarray:
        """[requests] bool: finished with a length or stop reason."""
        reasons = self.table.column("finish_reason")
        return np.fromiter((r is not None and r.type in COMPLETED_FINISH_TYPES for r in reasons),
                           bool, len(reasons))

    def _retire_finished(self) -> None:
        live = self.requests.live
        done = [r for r in live.values() if r.finish_reason is not None]
        for record in done:
            self.table.retire(record)
            row = self.table.row_of(record.rid)
            self.gaps.finished(row, record.finish_reason.type in COMPLETED_FINISH_TYPES)
            if self.writer is not None:
                self.writer.request(row, record)
            del live[record.rid]

    def _token_rows(self, chunk: list[StepValues | DecodeBlock | TokenStep]
                    ) -> tuple[np.ndarray, np.ndarray]:
        """[N] each sampled row's request row (-1: discarded) and [N] its token time."""
        rids, ids, start, dur = [], [], [], []   # per step, but ids: per item
        for r, i, s, d in map(_TOKEN_COLUMNS, chunk):
            rids += r
            ids.append(i)
            start += s
            dur += d
        # NOTE: decode steps of an unchanged batch share one rids tuple: rows once per tuple.
        rows_of = {key: self.table.rows_of(r) for key, r in {id(r): r for r in rids}.items()}
        codes = np.concatenate([rows_of[id(r)] for r in rids])
        codes[np.concatenate(ids, dtype=np.int64, casting="unsafe") == -1] = -1
        sizes = np.fromiter(map(len, rids), np.int64, len(rids))
        ends = np.array(start, dtype=float) + np.array(dur, dtype=float)
        return codes, np.repeat(ends, sizes)


class LogRequests(Mapping):
    """rid -> RequestRecord over a RunLog: a live request's own record, a finished one's row
    read back (token ids not kept), in submission order."""

    def __init__(self, table: RequestTable) -> None:
        self.table = table
        self.live: dict[str, RequestRecord] = {}

    def __getitem__(self, rid: str) -> RequestRecord:
        record = self.live.get(rid)
        return record if record is not None else self.table.record(self.table.row_of(rid))

    def __contains__(self, rid: object) -> bool:
        return rid in self.table

    def __iter__(self) -> Iterator[str]:
        return iter(self.table.rids())

    def __len__(self) -> int:
        return len(self.table)
