"""Workload: seeded request streams (arrivals, lengths, shared prefixes, multi-turn) and
their JSONL form; length distributions."""

import dataclasses
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.request.req import Req
from shared.request.sampling_params import SamplingParams
from shared.workload.arrivals import arrival_times
from shared.workload.length_dist import Empirical, Fixed, LogNormal, Uniform, as_length_dist
from shared.workload.multi_turn import MultiTurn
from shared.workload.shared_prefix import SharedPrefix
from shared.workload.sharegpt import ShareGPTLike
from shared.workload.synthetic import Synthetic
from shared.workload.workload import Workload, WorkloadRequest
from tests.strategies import length_dists

VOCAB = 50
BUILDERS = {  # (seed, rate=..., sampling_params=...) -> Workload
    "synthetic": lambda seed, sampling_params=None, **kw: Synthetic(
        20, Uniform(1, 12), LogNormal(8, 0.5, 32), sampling_params).build(
        vocab_size=VOCAB, seed=seed, **kw),
    "sharegpt_like": lambda seed, sampling_params=None, **kw: ShareGPTLike(
        20, max_len=256, sampling_params=sampling_params).build(vocab_size=VOCAB, seed=seed, **kw),
    "generated_shared_prefix": lambda seed, sampling_params=None, **kw: SharedPrefix(
        3, 4, 16, Uniform(2, 6), 5, sampling_params).build(vocab_size=VOCAB, seed=seed, **kw),
    "multi_turn": lambda seed, sampling_params=None, **kw: MultiTurn(
        3, 4, user_len=Uniform(1, 5), output_len=3, sampling_params=sampling_params).build(
        vocab_size=VOCAB, seed=seed, **kw),
}


def _gaps(n, rate, burstiness, seed=0):
    return np.diff(arrival_times(np.random.default_rng(seed), n, rate, burstiness), prepend=0.0)


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_same_seed_gives_identical_workload(kind):
    """Two builds with the same arguments are equal, request by request."""
    assert BUILDERS[kind](7, rate=3.0) == BUILDERS[kind](7, rate=3.0)


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_different_seed_gives_different_workload(kind):
    """Another seed changes the prompts (and the recorded config)."""
    a, b = BUILDERS[kind](1, rate=3.0), BUILDERS[kind](2, rate=3.0)
    assert [r.input_ids for r in a] != [r.input_ids for r in b]
    assert (a.config["seed"], b.config["seed"]) == (1, 2)


@pytest.mark.parametrize("kind", sorted(BUILDERS))
@pytest.mark.parametrize("rate", [2.5, math.inf])
def test_jsonl_round_trip_gives_an_equal_workload(kind, rate, tmp_path):
    """to_jsonl then from_jsonl rebuilds an equal Workload (header: name and config)."""
    template = SamplingParams(temperature=0.7, stop=("\n",), logit_bias={3: 1.5},
                              stop_token_ids=[2])
    w = BUILDERS[kind](3, rate=rate, sampling_params=template)
    w.to_jsonl(tmp_path / "w.jsonl")
    assert Workload.from_jsonl(tmp_path / "w.jsonl") == w
    header = json.loads((tmp_path / "w.jsonl").read_text().splitlines()[0])
    assert (header["format"], header["name"], header["config"]["generator"]) == (
        "batchtwin-workload", kind, kind)


def test_from_jsonl_rejects_a_file_without_workload_header(tmp_path):
    """A file whose first line is not a workload header is refused by name."""
    (tmp_path / "t.jsonl").write_text(json.dumps({"format": "batchtwin-trace"}) + "\n")
    with pytest.raises(ValueError, match="batchtwin-workload"):
        Workload.from_jsonl(tmp_path / "t.jsonl")


@pytest.mark.parametrize("line, what", [("not json", "line 2 .*Expecting value"),
                                         ("[1, 2]", "line 2 .*a JSON object, got list"),
                                         ('{"rid": "r0"}', "line 2 .*missing field")])
def test_from_jsonl_names_the_file_and_line_of_a_broken_request(tmp_path, line, what):
    """A request line that is not JSON, not an object or lacks a field: ValueError naming
    the file and the line, not a bare JSON or KeyError."""
    w = Synthetic(2, 4, 2).build(vocab_size=50)
    w.to_jsonl(tmp_path / "w.jsonl")
    lines = (tmp_path / "w.jsonl").read_text().splitlines()
    (tmp_path / "w.jsonl").write_text("\n".join([lines[0], line, *lines[2:]]) + "\n")
    with pytest.raises(ValueError, match=f"w.jsonl {what}"):
        Workload.from_jsonl(tmp_path / "w.jsonl")


def test_poisson_mean_gap_is_inverse_rate():
    """Burstiness 1: exponential gaps, mean 1/rate and coefficient of variation 1."""
    gaps = _gaps(4000, rate=5.0, burstiness=1.0)
    assert gaps.mean() == pytest.approx(0.2, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)


def test_burstiness_sets_gap_variation_at_fixed_mean():
    """Gamma shape k: CV = 1/sqrt(k) (k < 1 burstier, k > 1 smoother), mean still 1/rate."""
    cvs = {}
    for k in (0.25, 1.0, 4.0):
        gaps = _gaps(4000, rate=2.0, burstiness=k, seed=1)
        assert gaps.mean() == pytest.approx(0.5, rel=0.1)
        cvs[k] = gaps.std() / gaps.mean()
        assert cvs[k] == pytest.approx(1 / math.sqrt(k), rel=0.1)
    assert cvs[0.25] > cvs[1.0] > cvs[4.0]


def test_infinite_rate_puts_every_arrival_at_zero():
    """rate=inf: every request arrives at t=0."""
    w = Synthetic(5, 3, 2).build(vocab_size=VOCAB, rate=math.inf)
    assert [r.arrival_time for r in w] == [0.0] * 5


def test_infinite_burstiness_gives_constant_gaps():
    """burstiness=inf: every gap is exactly 1/rate."""
    np.testing.assert_allclose(_gaps(10, rate=4.0, burstiness=math.inf), 0.25)


def test_requests_are_sorted_by_arrival_stably():
    """A Workload sorts its requests by arrival time, ties keeping the given order."""
    p = SamplingParams()
    reqs = [WorkloadRequest(rid, t, (1,), p) for rid, t in [("a", 2.0), ("b", 0.0), ("c", 2.0), ("d", 1.0)]]
    assert [r.rid for r in Workload(tuple(reqs))] == ["b", "d", "a", "c"]


def test_duplicate_rids_rejected():
    """Two requests with one rid raise a ValueError naming the rid."""
    reqs = (WorkloadRequest("x", 0.0, (1,), SamplingParams()),
            WorkloadRequest("x", 1.0, (2,), SamplingParams()))
    with pytest.raises(ValueError, match="duplicate rid 'x'"):
        Workload(reqs)


def test_synthetic_lengths_tokens_and_default_sampling_params():
    """Fixed lengths are honoured, ids lie in [0, vocab), and max_new_tokens = output length
    with EOS ignored."""
    w = Synthetic(30, 7, Fixed(4)).build(vocab_size=VOCAB, seed=5, rate=10.0)
    assert [r.rid for r in w] == [f"r{i}" for i in range(30)]
    assert {len(r.input_ids) for r in w} == {7}
    assert all(0 <= t < VOCAB for r in w for t in r.input_ids)
    assert {r.sampling_params for r in w} == {SamplingParams(max_new_tokens=4, ignore_eos=True)}


def test_sampling_params_template_keeps_its_fields():
    """With a template, each request is `replace(template, max_new_tokens=output_len)`."""
    template = SamplingParams(temperature=0.5, top_p=0.9, max_new_tokens=999)
    w = Synthetic(3, 2, 6, sampling_params=template).build(vocab_size=VOCAB)
    assert {r.sampling_params for r in w} == {dataclasses.replace(template, max_new_tokens=6)}
    assert w.config["sampling_params"]["temperature"] == 0.5


def test_to_req_carries_prompt_params_and_arrival():
    """WorkloadRequest.to_req builds a scheduler Req with the same fields."""
    (r,) = Synthetic(1, 5, 3).build(vocab_size=VOCAB, rate=1.0)
    req = r.to_req()
    assert isinstance(req, Req)
    assert (req.rid, req.origin_input_ids, req.sampling_params, req.arrival_time) == (
        r.rid, list(r.input_ids), r.sampling_params, r.arrival_time)


def test_shared_prefix_groups_share_their_system_prompt():
    """Every prompt of a group starts with the group's system prompt; groups differ; the
    requests are shuffled across groups."""
    w = SharedPrefix(4, 5, 32, 8, 16).build(vocab_size=1000, seed=3, rate=5.0)
    assert len(w) == 20
    systems = {}
    for r in w:
        group = r.rid.split("-")[0]
        assert len(r.input_ids) == 40 and r.sampling_params.max_new_tokens == 16
        systems.setdefault(group, set()).add(r.input_ids[:32])
    assert all(len(s) == 1 for s in systems.values())
    assert len({s.pop() for s in systems.values()}) == 4
    assert [r.rid for r in w] != sorted(r.rid for r in w)


def test_multi_turn_prompt_extends_previous_turn():
    """Turn k's prompt = turn k-1's prompt + an answer of k-1's output length + a user
    message, and it arrives no earlier."""
    w = MultiTurn(3, 4, user_len=5, output_len=Uniform(2, 6), think_time=0.5).build(
        vocab_size=VOCAB, seed=4, rate=1.0)
    by_rid = {r.rid: r for r in w}
    assert sorted(by_rid) == sorted(f"c{c}-t{k}" for c in range(3) for k in range(4))
    for c in range(3):
        for k in range(1, 4):
            prev, cur = by_rid[f"c{c}-t{k - 1}"], by_rid[f"c{c}-t{k}"]
            assert cur.input_ids[:len(prev.input_ids)] == prev.input_ids
            assert len(cur.input_ids) == len(prev.input_ids) + prev.sampling_params.max_new_tokens + 5
            assert cur.arrival_time >= prev.arrival_time


def test_sharegpt_like_lengths_are_heavy_tailed_and_capped():
    """Prompt and output medians near 200, means above the medians, all <= max_len // 2."""
    w = ShareGPTLike(2000).build(vocab_size=VOCAB, seed=0)
    prompt = np.array([len(r.input_ids) for r in w])
    output = np.array([r.sampling_params.max_new_tokens for r in w])
    for x in (prompt, output):
        assert np.median(x) == pytest.approx(200, rel=0.1)
        assert x.mean() > 1.3 * np.median(x) and x.max() <= 1024


@pytest.mark.parametrize(("name", "text", "column"), [
    ("lens.txt", "length\n3\n5\n\n0\n", None),
    ("lens.csv", "prompt,output\n10,3\n20,5\n30,0\n", "output"),
    ("lens.csv", "10,3\n20,5\n30,0\n", 1),
    ("lens.json", "[3, 5, 0.0]", None),
])
def test_empirical_lengths_from_file_sample_with_replacement(tmp_path, name, text, column):
    """Text (optional header), a CSV column or a JSON list; samples come from the values,
    clipped to >= 1."""
    (tmp_path / name).write_text(text)
    dist = Empirical.from_file(tmp_path / name, column=column)
    assert dist.values == (3, 5, 0)
    samples = dist.sample(np.random.default_rng(0), 200)
    assert set(samples.tolist()) == {1, 3, 5}
    assert dist.to_dict()["source"] == str(tmp_path / name)


def test_empirical_file_with_non_integer_length_rejected(tmp_path):
    """A fractional length is an error naming the file."""
    (tmp_path / "bad.txt").write_text("3\n4.5\n")
    with pytest.raises(ValueError, match=r"4\.5.*not an integer"):
        Empirical.from_file(tmp_path / "bad.txt")


def test_lognormal_median_parameterisation():
    """LogNormal(median, sigma): sample median ~ median, mean ~ median * exp(sigma^2 / 2)."""
    x = LogNormal(100, 0.5).sample(np.random.default_rng(0), 4000)
    assert np.median(x) == pytest.approx(100, rel=0.05)
    assert x.mean() == pytest.approx(100 * math.exp(0.125), rel=0.05)


@pytest.mark.parametrize("kwargs", [
    {"rate": 0.0}, {"rate": -1.0}, {"rate": math.nan}, {"burstiness": 0.0},
    {"vocab_size": 0}, {"seed": None},
])
def test_bad_generator_parameters_rejected(kwargs):
    """Non-positive rate or burstiness, an empty vocabulary or no seed raise ValueError."""
    args = {"vocab_size": VOCAB, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Synthetic(3, 2, 2).build(**args)


def test_as_length_dist_reads_int_as_fixed_and_rejects_others():
    """An int is Fixed(int); a float or string is a TypeError."""
    assert as_length_dist(9) == Fixed(9)
    with pytest.raises(TypeError):
        as_length_dist(2.5)


@given(length_dists(), st.integers(0, 2**32 - 1))
def test_length_samples_are_positive_ints_reproducible_by_seed(dist, seed):
    """Every distribution gives int64 values >= 1 (within its bounds), the same for a seed."""
    a = dist.sample(np.random.default_rng(seed), 50)
    assert a.dtype == np.int64 and a.shape == (50,) and (a >= 1).all()
    assert (a == dist.sample(np.random.default_rng(seed), 50)).all()
    if isinstance(dist, Uniform):
        assert (a <= max(dist.high, 1)).all()
    if isinstance(dist, LogNormal) and dist.max_len is not None:
        assert (a <= dist.max_len).all()


@settings(max_examples=30)
@given(length_dists(max_len=16), length_dists(max_len=8), st.integers(0, 30),
       st.sampled_from([0.5, 1.0, 4.0, math.inf]), st.integers(0, 1000))
def test_any_synthetic_workload_round_trips_through_jsonl(prompt, output, n, rate, seed):
    """Whatever the distributions, saving and loading gives an equal workload."""
    w = Synthetic(n, prompt, output).build(vocab_size=VOCAB, seed=seed, rate=rate)
    with tempfile.TemporaryDirectory() as d:
        w.to_jsonl(Path(d) / "w.jsonl")
        assert Workload.from_jsonl(Path(d) / "w.jsonl") == w
