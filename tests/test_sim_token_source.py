"""Token sources: synthetic (seeded, never EOS, batch-independent) and replayed from a trace
(recorded ids, and the recorded run's external finishes)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import FinishReason, SamplingParams
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.trace.trace import RequestRecord, Trace
from sim.run.seeded_ids import skip_ids
from sim.run.token_source import ReplayTokenSource, SyntheticTokenSource

EOS = (0, 3, 7)


def test_synthetic_never_emits_an_eos_id_and_covers_the_rest():
    """Over many draws every id is in the vocabulary, none is EOS, all others appear."""
    source = SyntheticTokenSource(seed=5, vocab_size=8, eos_token_ids=EOS)
    rids = [f"r{i}" for i in range(200) for _ in range(20)]
    ids = source.token_ids(rids, [k for _ in range(200) for k in range(20)])
    assert ids.dtype == np.int64
    assert set(ids.tolist()) == set(range(8)) - set(EOS)


@given(st.permutations(range(12)), st.integers(0, 11))
def test_synthetic_tokens_are_batch_independent(order, cut):
    """A (rid, index) pair gets the same id whatever batch, order or instance it is drawn in."""
    pairs = [(f"req-{i % 4}", i * 3) for i in range(12)]
    alone = [SyntheticTokenSource(7, 1000, EOS).token_ids([r], [k])[0] for r, k in pairs]
    source = SyntheticTokenSource(7, 1000, EOS)
    batch = [pairs[i] for i in order][:cut + 1]
    ids = source.token_ids([r for r, _ in batch], [k for _, k in batch])
    assert ids.tolist() == [alone[i] for i in order][:cut + 1]


@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), st.integers(0, 2**40)), min_size=2,
                max_size=30), st.integers(0, 2**31))
def test_single_row_draws_equal_the_vectorised_ones(pairs, seed):
    """A one-request draw (computed in Python ints) gives the id the numpy path gives."""
    source = SyntheticTokenSource(seed, 128256, eos_token_ids=(128000, 128001, 128009))
    rids, idx = [r for r, _ in pairs], [k for _, k in pairs]
    assert [source.token_ids([r], [k])[0] for r, k in pairs] == source.token_ids(rids, idx).tolist()


def test_synthetic_seed_changes_the_tokens():
    """Different seeds give different streams; the same seed the same stream."""
    rids, idx = ["a"] * 50, list(range(50))
    a = SyntheticTokenSource(1, 32000).token_ids(rids, idx)
    assert a.tolist() == SyntheticTokenSource(1, 32000).token_ids(rids, idx).tolist()
    assert a.tolist() != SyntheticTokenSource(2, 32000).token_ids(rids, idx).tolist()


def test_synthetic_refuses_a_vocabulary_of_only_eos():
    """No id left to emit is a clear error."""
    with pytest.raises(ValueError, match="not an EOS id"):
        SyntheticTokenSource(0, 2, eos_token_ids=(0, 1))


@settings(max_examples=max(200, settings.default.max_examples))
@given(st.lists(st.tuples(st.integers(0, 12), st.sets(st.integers(2, 15), max_size=14),
                          st.integers(0, 16)), min_size=1, max_size=5),
       st.integers(1, 16), st.permutations(range(5)))
def test_a_request_draws_no_stop_id_before_its_min_new_tokens_in_any_batch(reqs, steps, order):
    """A request told of its stop ids and min_new_tokens draws neither those nor EOS before
    it, and its ids stay a function of (rid, index): the same one row at a time, in a batch,
    in a decode run's matrix, and from a fresh source told of it alone."""
    rids = tuple(f"r{i}" for i in range(len(reqs)))
    params = [SamplingParams(max_new_tokens=40, min_new_tokens=m, stop_token_ids=sorted(stops))
              for m, stops, _ in reqs]
    first = np.array([f for _, _, f in reqs])
    source = SyntheticTokenSource(3, 16, eos_token_ids=(0,))
    source.add_requests(rids, params)
    matrix = source.token_matrix(rids, first, steps)                           # [steps, B]
    for j in range(steps):
        assert source.token_ids(rids, first + j).tolist() == matrix[j].tolist()
    picked = [i for i in order if i < len(rids)]
    again = source.token_matrix(tuple(rids[i] for i in picked), first[picked], steps)
    assert again.tolist() == matrix[:, picked].tolist()
    for i, (rid, p) in enumerate(zip(rids, params, strict=True)):
        alone = SyntheticTokenSource(3, 16, eos_token_ids=(0,))
        alone.add_requests((rid,), (p,))
        ids = [alone.token_ids((rid,), [first[i] + j])[0] for j in range(steps)]
        assert ids == matrix[:, i].tolist()
        masked = {0, *p.stop_token_ids} if p.stop_token_ids else {0}
        assert not masked & set(ids[:max(0, p.min_new_tokens - first[i])])


def test_stop_ids_are_drawn_from_min_new_tokens_on():
    """Past min_new_tokens a stop id is as likely as any other id (it ends the request, as
    the model's would); before it, never; EOS never."""
    source = SyntheticTokenSource(3, 16, eos_token_ids=(0,))
    stops = set(range(8, 16))
    source.add_requests(("a",), (SamplingParams(min_new_tokens=50, stop_token_ids=sorted(stops)),))
    ids = source.token_ids(("a",) * 400, list(range(400))).tolist()
    assert not stops & set(ids[:50]) and stops <= set(ids[50:]) and 0 not in ids


def test_stop_ids_covering_the_vocabulary_before_min_new_tokens_are_a_clear_error():
    """No id left to draw before min_new_tokens is refused, naming the request."""
    source = SyntheticTokenSource(0, 4, eos_token_ids=(0,))
    with pytest.raises(ValueError, match=r"'a'.*cover the vocabulary"):
        source.add_requests(("a",), (SamplingParams(min_new_tokens=1, stop_token_ids=[1, 2, 3]),))


def test_a_rid_told_again_without_min_new_tokens_draws_unmasked_ids():
    """Telling the source a request's parameters again replaces what it knew of the rid."""
    source = SyntheticTokenSource(3, 16, eos_token_ids=(0,))
    plain = source.token_ids(("a", "b"), [0, 0]).tolist()
    source.add_requests(("a",), (SamplingParams(min_new_tokens=5, stop_token_ids=list(range(1, 15))),))
    assert source.token_ids(("a", "b"), [0, 0]).tolist() == [15, plain[1]]
    source.add_requests(("a",), (SamplingParams(),))
    assert source.token_ids(("a", "b"), [0, 0]).tolist() == plain


def test_skip_ids_maps_onto_the_vocabulary_minus_excluded():
    """skip_ids is a bijection from [0, V - k) to [0, V) minus the k excluded ids."""
    out = skip_ids(np.arange(5), (0, 3, 7))
    assert out.tolist() == [1, 2, 4, 5, 6]


def _trace(records):
    model = ModelInfo(vocab_size=100, eos_token_ids=(0,), context_length=64)
    trace = Trace(EngineConfig().resolve(model, kv_capacity=256), model)
    for rec in records:
        trace.requests[rec.rid] = rec
    return trace


def _record(rid, outputs, reason, max_new=10):
    return RequestRecord(rid, 0.0, (1, 2, 3), SamplingParams(max_new_tokens=max_new),
                         len(outputs), reason, output_ids=tuple(outputs))


def test_replay_returns_recorded_ids_and_the_fill_past_the_end():
    """Ids are the recorded output ids by (rid, index); past the end, the fill token."""
    source = ReplayTokenSource(_trace([_record("a", [5, 6, 7], FinishReason.by_length(3))]),
                               fill_token=9)
    assert source.token_ids(("a", "a", "a", "a"), [2, 0, 1, 3]).tolist() == [7, 5, 6, 9]
    with pytest.raises(ValueError, match="not in the replayed trace"):
        source.token_ids(("zz",), [0])


def test_replay_ends_only_what_no_token_explains():
    """Stop strings and aborts end a request at its recorded length; length, EOS and stop-token
    finishes are left to the scheduler."""
    stop_str = FinishReason.by_stop("END")
    abort = FinishReason.by_abort("client went away")
    source = ReplayTokenSource(_trace([
        _record("s", [5, 6], stop_str), _record("x", [5], abort),
        _record("l", [5] * 10, FinishReason.by_length(10)),
        _record("e", [5, 0], FinishReason.by_stop(0)),
    ]))
    assert source.finished_after("s", 2) == stop_str
    assert source.finished_after("s", 1) is None
    assert source.finished_after("x", 1) == abort
    assert source.finished_after("l", 10) is None
    assert source.finished_after("e", 2) is None
