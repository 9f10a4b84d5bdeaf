"""The multi-tenant workload: K system prompts with Zipf popularity, seeded."""

from __future__ import annotations

import collections

import pytest

from shared import MultiTenant, Workload


def _tenants(w: Workload) -> collections.Counter:
    return collections.Counter(r.rid.split("-")[0] for r in w)


def test_tenant_popularity_follows_the_zipf_exponent():
    """zipf 1 over 4 tenants: shares 12/25, 6/25, 4/25, 3/25 (within sampling noise over
    4000 requests); zipf 0: even."""
    skewed = _tenants(MultiTenant(4000, 4, 16, 8, 4, zipf=1.0).build(vocab_size=100))
    for k, share in enumerate((12 / 25, 6 / 25, 4 / 25, 3 / 25)):
        assert skewed[f"t{k}"] / 4000 == pytest.approx(share, abs=0.03)
    even = _tenants(MultiTenant(4000, 4, 16, 8, 4, zipf=0.0).build(vocab_size=100))
    assert all(even[f"t{k}"] / 4000 == pytest.approx(0.25, abs=0.03) for k in range(4))


def test_a_tenants_prompts_share_its_system_prompt_and_the_seed_repeats_them():
    w = MultiTenant(50, 3, 32, 8, 4).build(vocab_size=1000, seed=5, rate=10.0)
    prefix = {}
    for r in w:
        tenant = r.rid.split("-")[0]
        assert prefix.setdefault(tenant, r.input_ids[:32]) == r.input_ids[:32]
        assert len(r.input_ids) == 40
    assert len(set(prefix.values())) == len(prefix)
    again = MultiTenant(50, 3, 32, 8, 4).build(vocab_size=1000, seed=5, rate=10.0)
    assert [r.to_dict() for r in w] == [r.to_dict() for r in again]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"num_tenants": 0}, "num_tenants must be an integer >= 1"),
    ({"zipf": -1.0}, "zipf must be a finite number >= 0"),
])
def test_bad_tenant_arguments_are_refused_by_name(kwargs, match):
    args = {"num_tenants": 2, "zipf": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        MultiTenant(10, args.pop("num_tenants"), 8, 4, 4, **args).build(vocab_size=100)
