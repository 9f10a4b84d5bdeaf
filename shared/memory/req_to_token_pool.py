"""`ReqToTokenPool`: one row per running request, mapping token position -> KV slot (§3.1)."""

from __future__ import annotations

import mmap
from collections import deque
from collections.abc import Iterable

import numpy as np


class ReqToTokenPool:
    """`req_to_token[row, p]` is the KV slot holding token p of the request in `row`.

    Rows are handed out lowest first and reused in the order they were freed. Freeing a
    row that is already free raises.
    """

    def __init__(self, size: int, max_context_len: int) -> None:
        if size < 1 or max_context_len < 1:
            raise ValueError(f"ReqToTokenPool needs size >= 1 and max_context_len >= 1, "
                             f"got size={size}, max_context_len={max_context_len}")
        self.size = size
        self.max_context_len = max_context_len
        # [size, max_context_len + 4] int32 slot ids (SGLang keeps 4 spare columns)
        self.req_to_token = zeroed_table(size, max_context_len + 4)
        self.read_only_view = self.req_to_token.view()
        self.read_only_view.flags.writeable = False
        self._free_rows: deque[int] = deque(range(size))
        self._is_free = np.ones(size, dtype=bool)

    def available_size(self) -> int:
        return len(self._free_rows)

    def alloc(self, n: int) -> list[int] | None:
        """Take `n` free rows, or return None (changing nothing) when fewer are free."""
        if n > len(self._free_rows):
            return None
        rows = [self._free_rows.popleft() for _ in range(n)]
        for r in rows:  # NOTE: one or a few rows: scalar stores beat a fancy index
            self._is_free[r] = False
        return rows

    def free(self, rows: int | Iterable[int]) -> None:
        """Give rows back. Raises ValueError on a row that is out of range or already free."""
        rows = [rows] if isinstance(rows, (int, np.integer)) else [int(r) for r in rows]
        for r in rows:
            if not 0 <= r < self.size:
                raise ValueError(f"row {r} is outside the request pool [0, {self.size})")
            if self._is_free[r]:
                raise ValueError(f"row {r} freed twice")
            self._is_free[r] = True
            self._free_rows.append(r)

    def write(self, row: int, start: int, slots: np.ndarray) -> None:
        """`req_to_token[row, start:start+len(slots)] = slots`."""
        self.req_to_token[row, start : start + len(slots)] = slots

    def check_integrity(self) -> None:
        """The free list and the free mask agree, with no row listed twice."""
        listed = np.zeros(self.size, dtype=bool)
        for r in self._free_rows:
            if listed[r]:
                raise AssertionError(f"row {r} is on the free list twice")
            listed[r] = True
        if not np.array_equal(listed, self._is_free):
            raise AssertionError("request pool free list and free mask disagree")


def zeroed_table(rows: int, cols: int) -> np.ndarray:
    """[rows, cols] int32 zeros, mapped with small pages where the OS allows.

    NOTE: rows are first touched one by one as requests arrive. numpy advises huge pages for
    large arrays, and with transparent huge pages each such first touch may zero (and first
    compact) 2 MB: milliseconds, in the middle of a scheduling step. Small pages cost a few
    microseconds per new row."""
    if not hasattr(mmap, "MADV_NOHUGEPAGE"):
        return np.zeros((rows, cols), dtype=np.int32)
    buf = mmap.mmap(-1, rows * cols * 4)   # anonymous: zero-filled
    buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, dtype=np.int32).reshape(rows, cols)
