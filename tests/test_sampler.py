"""The token sampler (exec/runner/sampler.py, exec/runner/penalties.py) against SGLang's semantics (§11)."""

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from exec.runner.penalties import adjust_logits
from exec.runner.sampler import fmix32, hash_uniform, inverse_cdf_draw, joint_filter, sample
from shared.request.sampling_params import TOP_K_ALL, SamplingParams

P = SamplingParams
GREEDY = P(temperature=0.0)
PROBS4 = [0.5, 0.3, 0.15, 0.05]
EXTREME_SEEDS = [0, 1, -1, 42, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, -(1 << 63)]


def run(logits, params, outputs=None, seeds=None, positions=None, eos=()):
    """`sample` with defaults: no outputs, seed 42, position 0."""
    logits = torch.as_tensor(logits, dtype=torch.float32)
    b = logits.shape[0]
    return sample(logits, params, outputs or [[] for _ in range(b)],
                  np.full(b, 42) if seeds is None else np.asarray(seeds),
                  np.zeros(b, np.int64) if positions is None else np.asarray(positions), eos)


def draws(logits_row, param, n=4000, vary="seed"):
    """Tokens drawn for one request over n seeds (or n positions with seed 7)."""
    row = torch.as_tensor(logits_row, dtype=torch.float32).expand(n, -1)
    idx = np.arange(n)
    seeds, positions = (idx, np.zeros(n)) if vary == "seed" else (np.full(n, 7), idx)
    return run(row, [param] * n, seeds=seeds, positions=positions).next_token_ids.numpy()


def reference_allowed(logits, temperature, top_k, top_p, min_p):
    """Brute-force joint filter in float64: the set of token ids that may be sampled."""
    z = np.asarray(logits, np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    order = sorted(range(len(p)), key=lambda j: (-p[j], j))
    allowed, cum = set(), 0.0
    for rank, j in enumerate(order):
        if rank < top_k and (cum <= top_p or top_p >= 1) and p[j] >= p[order[0]] * min_p:
            allowed.add(j)
        cum += p[j]
    return allowed, p, order


def test_greedy_takes_argmax_with_raw_log_softmax():
    """Greedy requests pick argmax; their logprob is log_softmax without temperature."""
    logits = torch.randn(5, 40, generator=torch.Generator().manual_seed(0))
    params = [GREEDY, P(top_k=1, temperature=0.3), GREEDY, GREEDY, GREEDY]
    out = run(logits, params)
    assert torch.equal(out.next_token_ids, logits.argmax(-1))
    expected = torch.log_softmax(logits, -1).gather(1, out.next_token_ids[:, None])[:, 0]
    torch.testing.assert_close(out.next_token_logprobs, expected)


def test_input_logits_are_not_modified():
    """Sampling with penalties and bias leaves the caller's logits tensor untouched."""
    logits = torch.randn(2, 9, generator=torch.Generator().manual_seed(1))
    before = logits.clone()
    params = [P(frequency_penalty=1.0, logit_bias={3: 2.0}), P(repetition_penalty=1.5)]
    run(logits, params, outputs=[[1, 1], [2]])
    assert torch.equal(logits, before)


def test_seeded_sampling_is_reproducible():
    """Same logits, seed and position give the same token on every call."""
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(2))
    a = run(logits, [P(temperature=1.3)] * 4, seeds=[5, 6, 7, 8], positions=[3, 3, 9, 9])
    b = run(logits, [P(temperature=1.3)] * 4, seeds=[5, 6, 7, 8], positions=[3, 3, 9, 9])
    assert torch.equal(a.next_token_ids, b.next_token_ids)


@pytest.mark.parametrize("vary", ["seed", "position"])
def test_token_frequencies_match_softmax_over_temperature(vary):
    """Over many seeds (or positions) the draws follow softmax(logits / T) (chi-square test)."""
    logits, temperature, n = [1.0, 0.5, 0.0, -0.5, -1.0, 2.0], 0.8, 20000
    expected = n * torch.softmax(torch.tensor(logits) / temperature, -1).numpy()
    observed = np.bincount(draws(logits, P(temperature=temperature), n, vary), minlength=6)
    chi2 = ((observed - expected) ** 2 / expected).sum()
    assert chi2 < 25.7  # 99.99th percentile of chi-square with 5 degrees of freedom


def test_top_k_never_picks_outside_the_top_k():
    """With top_k=3 every draw is one of the 3 most likely tokens, and each of them occurs."""
    logits = torch.randn(30, generator=torch.Generator().manual_seed(3))
    tokens = set(draws(logits, P(top_k=3, temperature=5.0), 2000).tolist())
    assert tokens == set(logits.topk(3).indices.tolist())


def test_top_p_keeps_the_token_that_crosses_top_p():
    """top_p=0.6 over [0.5, 0.3, 0.15, 0.05] keeps tokens 0 and 1 (token 1 crosses 0.6)."""
    tokens = set(draws(np.log(PROBS4), P(top_p=0.6), 2000).tolist())
    assert tokens == {0, 1}


def test_tiny_top_p_keeps_only_the_argmax():
    """As top_p -> 0+ the first sorted token still survives, so sampling becomes argmax."""
    logits = torch.randn(64, generator=torch.Generator().manual_seed(4))
    tokens = set(draws(logits, P(top_p=1e-9, temperature=3.0), 500).tolist())
    assert tokens == {int(logits.argmax())}


@pytest.mark.parametrize(("min_p", "allowed"), [(0.25, {0, 1, 2}), (0.7, {0}), (0.0, {0, 1, 2, 3})])
def test_min_p_threshold_is_relative_to_the_max_prob(min_p, allowed):
    """min_p drops tokens with p < p_max * min_p (p_max = 0.5 here)."""
    keep = joint_filter(torch.tensor([PROBS4]), [P(min_p=min_p)])[0]
    assert set(torch.nonzero(keep)[:, 0].tolist()) == allowed


filter_rows = st.tuples(
    st.lists(st.integers(-6, 6).map(lambda x: x / 2), min_size=2, max_size=12),
    st.sampled_from([0.5, 1.0, 2.0]),
    st.one_of(st.integers(1, 14), st.just(TOP_K_ALL)),
    st.one_of(st.floats(0.01, 1.0), st.just(1.0)),
    st.one_of(st.just(0.0), st.floats(0.0, 1.0)),
)


@given(st.lists(filter_rows, min_size=1, max_size=4))
def test_joint_filter_matches_bruteforce_reference(rows):
    """Per row, the allowed tokens equal a brute-force top-k/top-p/min-p filter in numpy."""
    width = max(len(r[0]) for r in rows)
    logits = torch.full((len(rows), width), float("-inf"))
    expected = []
    for i, (row, temp, top_k, top_p, min_p) in enumerate(rows):
        allowed, p, order = reference_allowed(row, temp, top_k, top_p, min_p)
        cum_before = np.cumsum(p[order]) - p[order]
        assume(np.all(np.abs(cum_before - top_p) > 1e-5) or top_p >= 1)
        assume(np.all(np.abs(p - p.max() * min_p) > 1e-4 * p.max() * min_p))
        logits[i, : len(row)] = torch.tensor(row) / temp
        expected.append(allowed)
    params = [P(top_k=k, top_p=tp, min_p=mp) for _, _, k, tp, mp in rows]
    keep = joint_filter(torch.softmax(logits, -1), params)
    got = [set(torch.nonzero(k)[:, 0].tolist()) & set(range(len(r[0]))) for k, r in zip(keep, rows, strict=True)]
    assert got == expected


def test_penalties_match_hand_computed_reference():
    """Frequency/presence (additive) then repetition (multiplicative) over generated tokens only."""
    logits = torch.tensor([[1.0, -1.0, 2.0, -2.0, 0.5], [1.0, -1.0, 2.0, -2.0, 0.5]])
    params = [P(frequency_penalty=0.5, presence_penalty=0.25, repetition_penalty=2.0), P()]
    got = adjust_logits(logits, params, [[0, 0, 1, 3, 0, 2], []], eos_token_ids=[])
    # token 0: count 3 -> 1 - 1.5 - 0.25 = -0.75 -> *2; tokens 1, 3: x - 0.75 -> *2;
    # token 2: 2 - 0.75 = 1.25 -> /2; token 4 was never generated: unchanged.
    expected = torch.tensor([[-1.5, -3.5, 0.625, -5.5, 0.5], [1.0, -1.0, 2.0, -2.0, 0.5]])
    torch.testing.assert_close(got, expected)


def test_min_new_tokens_masks_eos_and_stop_ids_until_reached():
    """EOS and stop_token_ids read -inf while fewer than min_new_tokens were generated, then not."""
    logits = torch.tensor([[5.0, 0.0, 4.0, 1.0]] * 2)
    params = [P(min_new_tokens=2, stop_token_ids=[2], temperature=0.0)] * 2
    out = run(logits, params, outputs=[[3], [3, 1]], eos=[0])
    assert out.next_token_ids.tolist() == [3, 0]
    masked = adjust_logits(logits, params, [[3], [3, 1]], [0])
    assert masked[0, 0] == masked[0, 2] == float("-inf") and torch.isfinite(masked[1]).all()


def test_logit_bias_is_added():
    """logit_bias adds its value to the named tokens and changes which token is greedy."""
    logits = torch.tensor([[1.0, 0.0, 0.0]])
    got = adjust_logits(logits, [P(logit_bias={1: 2.5, 2: -1.0})], [[]], [])
    torch.testing.assert_close(got, torch.tensor([[1.0, 2.5, -1.0]]))
    assert run(logits, [P(temperature=0.0, logit_bias={1: 2.5})]).next_token_ids.tolist() == [1]


def test_output_logprob_is_log_softmax_over_temperature_before_truncation():
    """A sampled token's logprob is log_softmax(logits / T)[token], ignoring top-k/top-p/min-p."""
    logits = torch.randn(1, 20, generator=torch.Generator().manual_seed(5)).expand(300, -1)
    out = run(logits, [P(temperature=0.7, top_k=3, top_p=0.8)] * 300, seeds=np.arange(300))
    full = torch.log_softmax(logits / 0.7, -1).gather(1, out.next_token_ids[:, None])[:, 0]
    torch.testing.assert_close(out.next_token_logprobs, full)


def test_top_logprobs_are_the_most_likely_tokens_when_requested():
    """top_logprobs lists top_logprobs_num (id, logprob) pairs, most likely first, if asked."""
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]] * 2)
    out = run(logits, [P(return_logprob=True, top_logprobs_num=2), P(top_logprobs_num=2)])
    lp = torch.log_softmax(logits[0], -1)
    assert [t for t, _ in out.top_logprobs[0]] == [1, 3] and out.top_logprobs[1] == ()
    assert out.top_logprobs[0][0][1] == pytest.approx(float(lp[1]))


other_rows = st.tuples(st.lists(st.floats(-4, 4), min_size=16, max_size=16),
                       st.sampled_from([GREEDY, P(), P(top_k=4), P(top_p=0.5, temperature=0.5)]),
                       st.integers(0, 1000), st.integers(0, 500))


@given(st.lists(other_rows, max_size=4), st.integers(-(1 << 63), (1 << 63) - 1),
       st.integers(0, 10**6), st.data())
def test_seeded_token_is_independent_of_batch_and_order(others, seed, position, data):
    """A request's token depends on (seed, position) only: alone or batched, in any order."""
    target = (torch.randn(16, generator=torch.Generator().manual_seed(6)).tolist(),
              P(temperature=1.5), seed, position)
    alone = run([target[0]], [target[1]], seeds=[seed], positions=[position])
    rows = data.draw(st.permutations([target, *others]))
    batch = run([r[0] for r in rows], [r[1] for r in rows], seeds=[r[2] for r in rows],
                positions=[r[3] for r in rows])
    i = next(k for k, r in enumerate(rows) if r is target)
    assert batch.next_token_ids[i] == alone.next_token_ids[0]


def test_different_seeds_give_different_tokens():
    """Over 64 seeds on a flat 100-token vocabulary, draws spread over many tokens."""
    assert len(set(draws(torch.zeros(100), P(), 64).tolist())) > 30


def test_uniforms_stay_strictly_inside_unit_interval_for_extreme_seeds():
    """u in (0, 1) for extreme int64 seeds and positions."""
    seeds = torch.tensor(EXTREME_SEEDS)
    positions = torch.tensor([0, 1, (1 << 31) - 1, 1 << 31, 1 << 40, 5, 0, 7])
    u = hash_uniform(seeds, positions, 4096)
    assert u.dtype == torch.float64 and (u > 0).all() and (u < 1).all()


def test_masked_tokens_are_never_sampled_even_with_adversarial_seeds():
    """-inf and filtered-out tokens are never drawn, even for uniforms at the ends of (0, 1)."""
    logits = torch.full((len(EXTREME_SEEDS), 64), float("-inf"))
    logits[:, ::7] = torch.linspace(-30, 0, 10)
    out = run(logits, [P(temperature=2.0)] * len(EXTREME_SEEDS), seeds=EXTREME_SEEDS)
    assert (out.next_token_ids % 7 == 0).all()
    logprobs = torch.tensor([[float("-inf"), 0.0, -50.0, float("-inf")]] * 3)
    keep = torch.tensor([[True, False, True, True]] * 3)
    u = torch.tensor([2.0**-33, 0.5, 1 - 2.0**-33], dtype=torch.float64)
    assert inverse_cdf_draw(logprobs, keep, u).tolist() == [2, 2, 2]


def test_mixed_greedy_and_sampled_batch_matches_each_request_alone():
    """Greedy rows take argmax, sampled rows draw as alone; ids int64, logprobs float32."""
    logits = torch.randn(4, 32, generator=torch.Generator().manual_seed(7))
    params = [GREEDY, P(top_k=5), GREEDY, P(min_p=0.1, temperature=1.7)]
    out = run(logits, params, seeds=[1, 2, 3, 4], positions=[9, 8, 7, 6])
    alone = [run(logits[i : i + 1], [params[i]], seeds=[i + 1], positions=[9 - i]) for i in range(4)]
    assert out.next_token_ids.tolist() == [int(a.next_token_ids[0]) for a in alone]
    assert out.next_token_ids.dtype == torch.int64 and out.next_token_logprobs.dtype == torch.float32
    assert out.next_token_ids[0] == logits[0].argmax() and out.next_token_ids[2] == logits[2].argmax()


def test_hash_is_murmur3_fmix32():
    """The overflow-free int64 fmix32 equals MurmurHash3's finaliser computed in Python."""
    def reference(h):
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & 0xFFFFFFFF
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & 0xFFFFFFFF
        return h ^ (h >> 16)
    values = [0, 1, 2, 12345, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xDEADBEEF]
    assert fmix32(torch.tensor(values)).tolist() == [reference(v) for v in values]


def test_zero_repetition_penalty_keeps_logprobs_finite():
    """repetition_penalty=0 (accepted, as in SGLang) boosts seen tokens without inf or NaN."""
    logits = torch.tensor([[1.0, 2.0, -1.0, 0.5]])
    out = run(logits, [P(repetition_penalty=0.0, temperature=1.0)], outputs=[[0, 2]])
    assert torch.isfinite(out.next_token_logprobs).all()
    assert out.next_token_ids.tolist() == [0]  # the seen positive logit dominates
