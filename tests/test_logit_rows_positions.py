"""`compute_positions` (semantics §8.3) and `select_logit_rows` (§10.2) against brute-force
references written straight from the spec's rules."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.batch.logit_rows import select_logit_rows
from shared.batch.positions import compute_positions

# --- references ------------------------------------------------------------------------


def _ref_positions(prefix, ext):
    """concat_i range(prefix_i, prefix_i + ext_i) and the exclusive cumsum of ext."""
    positions = [p for pre, e in zip(prefix, ext, strict=True) for p in range(pre, pre + e)]
    starts = [sum(ext[:i]) for i in range(len(ext))]
    return positions, starts


def _ref_logit_rows(ext, starts):
    """§10.2 row by row: request i keeps hidden rows [start_i, e_i) of its extend, with
    start_i = s_i - 1 when s_i == e_i; samples from its last kept row; its input-logprob
    rows are the first e_i - s_i kept rows."""
    pruned, sample, logprob = [], [], []
    offset = 0
    for e, s in zip(ext, starts, strict=True):
        start = s - 1 if s == e else s
        first = len(pruned)
        pruned.extend(offset + k for k in range(start, e))
        sample.append(len(pruned) - 1)
        logprob.extend(first + j for j in range(e - s))
        offset += e
    return pruned, sample, logprob


# --- strategies ------------------------------------------------------------------------

prefix_ext_pairs = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 12)), max_size=8)

ext_start_pairs = st.lists(
    st.integers(1, 12).flatmap(lambda e: st.tuples(st.just(e), st.integers(0, e))), max_size=8)


def _as_input(values, as_array):
    return np.array(values, dtype=np.int32) if as_array else list(values)


# --- compute_positions -----------------------------------------------------------------


@given(pairs=prefix_ext_pairs, as_array=st.booleans())
def test_positions_equal_concatenated_ranges_and_starts_the_exclusive_cumsum(pairs, as_array):
    """positions == concat_i range(pre_i, pre_i + ext_i); extend_start_loc == exclusive cumsum."""
    prefix, ext = [p for p, _ in pairs], [e for _, e in pairs]
    out = compute_positions(_as_input(prefix, as_array), _as_input(ext, as_array))
    want_pos, want_starts = _ref_positions(prefix, ext)
    assert out.positions.tolist() == want_pos
    assert out.extend_start_loc.tolist() == want_starts
    assert out.positions.dtype == np.int64
    assert out.extend_start_loc.dtype == np.int64


@pytest.mark.parametrize("empty", [[], np.zeros(0, np.int64)], ids=["list", "array"])
def test_positions_of_an_empty_batch_are_empty_int64(empty):
    """No requests in -> empty int64 positions and starts out."""
    out = compute_positions(empty, empty)
    assert out.positions.shape == (0,) and out.positions.dtype == np.int64
    assert out.extend_start_loc.shape == (0,) and out.extend_start_loc.dtype == np.int64


@given(seq_lens=st.lists(st.integers(1, 100), min_size=1, max_size=8))
def test_positions_of_a_decode_batch_are_seq_lens_minus_one(seq_lens):
    """Decode is prefix = seq - 1, extend = 1: one position per request, at seq - 1."""
    seq = np.array(seq_lens, dtype=np.int64)
    out = compute_positions(seq - 1, np.ones_like(seq))
    assert out.positions.tolist() == (seq - 1).tolist()
    assert out.extend_start_loc.tolist() == list(range(len(seq_lens)))


def test_positions_of_the_design_example():
    """ARCHITECTURE.md §4: prefixes [0, 3], extends [6, 3] -> [0..5, 3..5], starts [0, 6]."""
    out = compute_positions([0, 3], [6, 3])
    assert out.positions.tolist() == [0, 1, 2, 3, 4, 5, 3, 4, 5]
    assert out.extend_start_loc.tolist() == [0, 6]


# --- select_logit_rows -----------------------------------------------------------------


def test_logit_rows_match_the_worked_example():
    """§10.2's worked example: ext [4, 5, 6], logprob starts [0, 5, 3]."""
    rows = select_logit_rows([4, 5, 6], [0, 5, 3])
    assert rows.pruned_rows.tolist() == [0, 1, 2, 3, 8, 12, 13, 14]
    assert rows.sample_indices.tolist() == [3, 4, 7]
    assert rows.input_logprob_indices.tolist() == [0, 1, 2, 3, 5, 6, 7]


@given(ext=st.lists(st.integers(1, 12), max_size=8), as_array=st.booleans())
def test_logit_rows_without_starts_are_each_requests_last_row(ext, as_array):
    """No logprob starts: pruned = cumsum(ext) - 1, sample = arange(B), no logprob rows."""
    rows = select_logit_rows(_as_input(ext, as_array))
    assert rows.pruned_rows.tolist() == (np.cumsum(ext, dtype=np.int64) - 1).tolist()
    assert rows.sample_indices.tolist() == list(range(len(ext)))
    assert rows.input_logprob_indices.tolist() == []


@given(ext=st.lists(st.integers(1, 12), max_size=8))
def test_logit_rows_with_every_start_at_the_end_equal_those_without_starts(ext):
    """Starts all == ext (no request wants input logprobs) select the same rows as None."""
    with_starts, without = select_logit_rows(ext, ext), select_logit_rows(ext)
    for a, b in zip(with_starts, without, strict=True):
        assert a.tolist() == b.tolist()


@given(pairs=ext_start_pairs, as_array=st.booleans())
def test_logit_rows_equal_the_brute_force_reference(pairs, as_array):
    """Random (ext, start) pairs with 0 <= start <= ext: every output equals §10.2's rules."""
    ext, starts = [e for e, _ in pairs], [s for _, s in pairs]
    rows = select_logit_rows(_as_input(ext, as_array), _as_input(starts, as_array))
    pruned, sample, logprob = _ref_logit_rows(ext, starts)
    assert rows.pruned_rows.tolist() == pruned
    assert rows.sample_indices.tolist() == sample
    assert rows.input_logprob_indices.tolist() == logprob


@given(pairs=ext_start_pairs)
def test_logit_rows_sample_each_requests_last_token_and_count_b(pairs):
    """Exactly B sample indices, each pointing at its request's last hidden row."""
    ext, starts = [e for e, _ in pairs], [s for _, s in pairs]
    rows = select_logit_rows(ext, starts)
    assert len(rows.sample_indices) == len(ext)
    assert rows.pruned_rows[rows.sample_indices].tolist() == (np.cumsum(ext) - 1).tolist()
    assert len(rows.input_logprob_indices) == sum(e - s for e, s in pairs)


@given(pairs=ext_start_pairs, with_starts=st.booleans())
def test_pruned_rows_and_sample_indices_strictly_increase(pairs, with_starts):
    """Both index lists strictly increase, so a full-length one is the identity (the
    logits processor skips the copy then)."""
    ext, starts = [e for e, _ in pairs], [s for _, s in pairs]
    rows = select_logit_rows(ext, starts if with_starts else None)
    for idx in (rows.pruned_rows, rows.sample_indices):
        assert (np.diff(idx) > 0).all()


@given(ext=st.integers(1, 12))
def test_a_start_at_the_end_gives_one_sample_row_and_no_logprob_rows(ext):
    """s == e: the request keeps exactly its last row, to sample from, and no logprob rows."""
    rows = select_logit_rows([ext], [ext])
    assert rows.pruned_rows.tolist() == [ext - 1]
    assert rows.sample_indices.tolist() == [0]
    assert rows.input_logprob_indices.tolist() == []


@pytest.mark.parametrize(("ext", "starts"), [
    ([3], [4]),            # start past the extend
    ([3, 2], [0, 3]),      # the second request's start past its extend
    ([3], [-1]),           # negative start
    ([0], [0]),            # an empty extend has no row to sample from
])
def test_invalid_logprob_starts_raise_value_error(ext, starts):
    """A start outside [0, ext] (or an empty extend) is rejected, not silently clipped."""
    with pytest.raises(ValueError, match="logprob start"):
        select_logit_rows(ext, starts)


@pytest.mark.parametrize("starts", [None, [0, 2, 1]])
def test_logit_rows_are_int64(starts):
    """All three outputs are int64 index arrays, with or without logprob starts."""
    rows = select_logit_rows(np.array([2, 3, 1], dtype=np.int32), starts)
    assert [a.dtype for a in rows] == [np.dtype(np.int64)] * 3
