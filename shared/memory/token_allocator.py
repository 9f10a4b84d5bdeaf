"""`TokenToKVPoolAllocator`: hands out KV slots one page at a time (semantics §3.3–§3.4).

Slot id = page * page_size + offset. Page 0 (slot 0 when page_size == 1) is never handed
out: padding rows write their K/V there. With page_size 1 freed slots go to the back of the
free list (FIFO reuse); with page_size > 1 freed pages go to the front (LIFO), sorted.

Every allocation either succeeds whole or returns None and changes nothing.

NOTE: the free list is a ring buffer over one array of num_pages entries (a page is on it at
most once), so a free costs the pages it gives back, not a copy of the whole list: an engine
without a prefix cache frees every finished request's KV.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class AllocatorState(NamedTuple):
    """An opaque snapshot for `restore_state`."""

    free_pages: np.ndarray
    is_free: np.ndarray


def _ceil_div(a: np.ndarray, b: int) -> np.ndarray:
    return -(-a // b)


class TokenToKVPoolAllocator:
    """A free list of KV pages over `size` token slots (`size // page_size` pages, plus page 0)."""

    def __init__(self, size: int, page_size: int = 1) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        if size < page_size:
            raise ValueError(f"size ({size}) must hold at least one page of {page_size} tokens")
        self.page_size = page_size
        self.num_pages = size // page_size
        self.size = self.num_pages * page_size
        self._ring = np.arange(1, self.num_pages + 1, dtype=np.int64)  # [num_pages]
        self._head = 0                                   # ring index of the first free page
        self._count = self.num_pages                     # free pages, from _head on (wrapping)
        self._is_free = np.ones(self.num_pages + 1, dtype=bool)
        self._is_free[0] = False
        self._stamp = np.zeros(self.num_pages + 1, dtype=np.int64)  # scratch for _listed_twice
        self._order = np.arange(self.num_pages + 1, dtype=np.int64)  # read-only: 0, 1, 2, ...
        self._order.flags.writeable = False

    def available_size(self) -> int:
        """Free tokens (whole free pages times page_size)."""
        return self._count * self.page_size

    def is_free(self, slots: np.ndarray) -> np.ndarray:
        """Per slot: is its page on the free list? [n] bool."""
        return self._is_free[np.asarray(slots, dtype=np.int64) // self.page_size]

    def alloc(self, n: int) -> np.ndarray | None:
        """`n` slots (a multiple of page_size) from whole pages, or None."""
        ps = self.page_size
        if n % ps:
            raise ValueError(f"alloc({n}) must be a multiple of page_size {ps}")
        pages = self._take(n // ps)
        if pages is None or ps == 1:
            return pages
        return (pages[:, None] * ps + np.arange(ps)).reshape(-1)

    def alloc_extend(
        self, prefix_lens: np.ndarray, seq_lens: np.ndarray, last_loc: np.ndarray
    ) -> np.ndarray | None:
        """Slots for tokens [prefix_i, seq_i) of each request, concatenated, or None.

        Each request first fills the tail of its partial last page (slots last_loc+1, ...),
        then takes whole new pages, then a new partial page. `last_loc[i]` is the slot of
        token prefix_i - 1, or -1 when the prefix is empty.
        """
        pre, seq, last = (np.asarray(a, dtype=np.int64) for a in (prefix_lens, seq_lens, last_loc))
        ps = self.page_size
        if ps == 1:  # every token is a page of its own: the next free slots, in order
            return self._take(int(np.add.reduce(seq - pre)))
        if np.any((last + 1) % ps != pre % ps):
            raise ValueError("alloc_extend: last_loc does not end at the prefix's page offset")
        new_pages = _ceil_div(seq, ps) - _ceil_div(pre, ps)
        pages = self._take(int(new_pages.sum()))
        if pages is None:
            return None
        ext = seq - pre
        rid = np.repeat(np.arange(len(seq)), ext)                   # [T] request of each token
        pos = np.arange(int(ext.sum())) - np.repeat(np.cumsum(ext) - ext, ext) + pre[rid]  # [T]
        partial_end = _ceil_div(pre, ps)[rid] * ps                  # [T] end of the old partial page
        page_start = np.cumsum(new_pages) - new_pages               # [B] offset into `pages`
        page_idx = page_start[rid] + pos // ps - partial_end // ps  # [T] (< 0 inside old page)
        in_old_page = pos < partial_end
        new_slot = pages[np.where(in_old_page, 0, page_idx)] * ps + pos % ps if len(pages) else 0
        return np.where(in_old_page, last[rid] + 1 + pos - pre[rid], new_slot).astype(np.int64)

    def alloc_decode(self, seq_lens: np.ndarray, last_loc: np.ndarray) -> np.ndarray | None:
        """One slot per request for token seq_i - 1 (`seq_lens` already counts it), or None."""
        seq, last = np.asarray(seq_lens, dtype=np.int64), np.asarray(last_loc, dtype=np.int64)
        ps = self.page_size
        if ps == 1:  # every token opens a page of its own
            return self._take(len(seq))
        opens_page = (seq - 1) % ps == 0                            # [B]
        pages = self._take(int(opens_page.sum()))
        if pages is None:
            return None
        slots = last + 1
        slots[opens_page] = pages * ps
        return slots

    def free(self, slots: np.ndarray) -> None:
        """Give back the pages holding `slots`. Raises ValueError on page 0, an out-of-range
        slot, or a page that is already free (a double free); nothing changes then."""
        slots = np.asarray(slots, dtype=np.int64)
        if slots.size == 0:
            return
        # NOTE: with one slot per page the pages are the slots, unsorted (FIFO order kept);
        # a slot listed twice is found without sorting by stamping each page with its index.
        pages = slots if self.page_size == 1 else np.unique(slots // self.page_size)
        if np.minimum.reduce(pages) < 1 or np.maximum.reduce(pages) > self.num_pages:
            raise ValueError(f"free: slots outside [{self.page_size}, "
                             f"{(self.num_pages + 1) * self.page_size}) (page 0 is reserved)")
        if self._is_free[pages].any():
            raise ValueError(f"free: page(s) {pages[self._is_free[pages]][:8].tolist()} freed twice")
        if self.page_size == 1 and self._listed_twice(pages):
            raise ValueError("free: a slot is listed twice (double free)")
        self._is_free[pages] = True
        if self.page_size == 1:
            self._put(pages, (self._head + self._count) % self.num_pages)
        else:
            self._head = (self._head - len(pages)) % self.num_pages
            self._put(pages, self._head)
        self._count += len(pages)

    def free_each(self, parts: list[np.ndarray]) -> None:
        """`free` each part in turn; at page size 1 in one call (the free list takes the
        slots in the same order), so freeing many parts costs one free."""
        if self.page_size == 1 and len(parts) > 1:
            self.free(np.concatenate(parts))
            return
        for part in parts:
            self.free(part)

    def free_pages(self) -> np.ndarray:
        """[F] int64 the free list in order (the next page handed out first); a copy."""
        end = self._head + self._count
        if end <= self.num_pages:
            return self._ring[self._head : end].copy()
        return np.concatenate((self._ring[self._head :], self._ring[: end - self.num_pages]))

    def backup_state(self) -> AllocatorState:
        return AllocatorState(self.free_pages(), self._is_free.copy())

    def restore_state(self, state: AllocatorState) -> None:
        self._head, self._count = 0, len(state.free_pages)
        self._ring[: self._count] = state.free_pages
        self._is_free = state.is_free.copy()

    def check_integrity(self) -> None:
        """Free list holds distinct pages in [1, num_pages] that the free mask marks free."""
        fp = self.free_pages()
        if fp.size and (fp.min() < 1 or fp.max() > self.num_pages):
            raise AssertionError("free list holds a page outside [1, num_pages]")
        if np.unique(fp).size != fp.size:
            raise AssertionError("free list holds a page twice")
        mask = np.zeros_like(self._is_free)
        mask[fp] = True
        if not np.array_equal(mask, self._is_free):
            raise AssertionError("free list and free mask disagree")

    def _listed_twice(self, pages: np.ndarray) -> bool:
        order = self._order[: len(pages)]  # NOTE: a view, no new array per free
        self._stamp[pages] = order   # a page listed twice keeps one index: another reads back wrong
        return bool((self._stamp[pages] != order).any())

    def _take(self, n_pages: int) -> np.ndarray | None:
        """The first n_pages free pages, off the list ([n] int64, a new array), or None."""
        if n_pages > self._count:
            return None
        start, end = self._head, self._head + n_pages
        if end <= self.num_pages:
            pages = self._ring[start:end].copy()
        else:
            pages = np.concatenate((self._ring[start:], self._ring[: end - self.num_pages]))
        self._head, self._count = end % self.num_pages, self._count - n_pages
        self._is_free[pages] = False
        return pages

    def _put(self, pages: np.ndarray, at: int) -> None:
        """Write `pages` into the ring from index `at` on, wrapping."""
        first = min(len(pages), self.num_pages - at)
        self._ring[at : at + first] = pages[:first]
        self._ring[: len(pages) - first] = pages[first:]
