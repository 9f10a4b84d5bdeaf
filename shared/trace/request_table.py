"""`RequestTable`: a run's requests as numpy columns, one row per submitted request in
submission order (the order of `Trace.requests`), which is what a lean run (`RunLog`) keeps
of a request once it finished: its times, lengths, cache hits, retractions, finish reason
and sampling parameters, not its token ids.

Rows are added at submission (`add`) and filled when the request finished (`retire`, from
its `RequestRecord`); `record(row)` reads a row back as a RequestRecord without token ids.
Finish reasons and sampling parameters are interned (equal values share one object), so a
million requests of a few shapes hold a few objects, not a million.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shared.request.finish_reason import FinishReason
from shared.request.sampling_params import SamplingParams
from shared.trace.trace import RequestRecord

FLOAT_COLUMNS = ("arrival_time", "first_token_time", "finish_time")
INT_COLUMNS = ("prompt_len", "output_len", "cached_tokens", "num_retractions", "prebuilt_outputs")
OBJECT_COLUMNS = ("rid", "finish_reason", "sampling_params")
FIRST_CAPACITY = 1024


class RequestTable:
    """Columns named as RequestRecord's fields (plus `prompt_len`, `prebuilt_outputs`), grown
    by doubling; `len` is the number of rows."""

    def __init__(self) -> None:
        self._rows: dict[str, int] = {}
        self._interned: dict[Any, Any] = {}
        self._cols: dict[str, np.ndarray] = {}
        self._n = 0
        self._allocate(FIRST_CAPACITY)

    def __len__(self) -> int:
        return self._n

    def __contains__(self, rid: object) -> bool:
        return rid in self._rows

    def row_of(self, rid: str) -> int:
        """The row of `rid` (KeyError if it was never added)."""
        return self._rows[rid]

    def rows_of(self, rids: tuple[str, ...]) -> np.ndarray:
        """[len(rids)] int64 the row of each rid (KeyError for one never added)."""
        return np.fromiter(map(self._rows.__getitem__, rids), np.int64, len(rids))

    def rids(self) -> list[str]:
        """Every rid, in row order."""
        return list(self._rows)

    def add(self, record: RequestRecord) -> int:
        """A new row for a just submitted request (its arrival, prompt length, parameters and
        any outputs it arrived with); returns the row."""
        row = self._n
        if row == len(self._cols["rid"]):
            self._allocate(2 * row)
        self._rows[record.rid] = row
        self._n += 1
        self._write(row, record)
        return row

    def retire(self, record: RequestRecord) -> None:
        """Fill the row of a finished request from its record."""
        self._write(self._rows[record.rid], record)

    def record(self, row: int) -> RequestRecord:
        """The row as a RequestRecord (token ids not kept: empty)."""
        c = self._cols
        return RequestRecord(
            rid=c["rid"][row], arrival_time=float(c["arrival_time"][row]), input_ids=(),
            sampling_params=c["sampling_params"][row], output_len=int(c["output_len"][row]),
            finish_reason=c["finish_reason"][row],
            first_token_time=float(c["first_token_time"][row]),
            finish_time=float(c["finish_time"][row]), cached_tokens=int(c["cached_tokens"][row]),
            num_retractions=int(c["num_retractions"][row]))

    def column(self, name: str) -> np.ndarray:
        """[len] the named column (a view; do not write)."""
        return self._cols[name][:self._n]

    def _write(self, row: int, r: RequestRecord) -> None:
        c = self._cols
        c["rid"][row] = r.rid
        c["arrival_time"][row] = r.arrival_time
        c["first_token_time"][row] = r.first_token_time
        c["finish_time"][row] = r.finish_time
        c["prompt_len"][row] = len(r.input_ids)
        c["output_len"][row] = r.output_len
        c["cached_tokens"][row] = r.cached_tokens
        c["num_retractions"][row] = r.num_retractions
        c["prebuilt_outputs"][row] = len(r.prebuilt_output_ids)
        c["finish_reason"][row] = self._intern(r.finish_reason)
        c["sampling_params"][row] = self._intern(r.sampling_params)

    def _intern(self, value: FinishReason | SamplingParams | None) -> Any:
        """One shared object per distinct value (unhashable values are kept as they are)."""
        try:
            return self._interned.setdefault(value, value)
        except TypeError:  # NOTE: e.g. a logit_bias dict inside the parameters
            return value

    def _allocate(self, capacity: int) -> None:
        """Grow every column to `capacity` rows, keeping the rows written."""
        n, old = self._n, self._cols
        new = {name: np.full(capacity, math.nan) for name in FLOAT_COLUMNS}
        new |= {name: np.zeros(capacity, np.int64) for name in INT_COLUMNS}
        new |= {name: np.full(capacity, None, dtype=object) for name in OBJECT_COLUMNS}
        for name, col in old.items():
            new[name][:n] = col[:n]
        self._cols = new
