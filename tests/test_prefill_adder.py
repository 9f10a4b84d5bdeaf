"""PrefillAdder budgets and admission (semantics §5.2) and NewTokenRatio (§5.3)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.admission.prefill_adder import AddReqResult, PrefillAdder
from shared.loop.new_token_ratio import NewTokenRatio
from shared.memory.kv_memory import KVMemory
from shared.request.req import Req
from shared.request.sampling_params import SamplingParams

CONTINUE, NO_TOKEN, OTHER = AddReqResult.CONTINUE, AddReqResult.NO_TOKEN, AddReqResult.OTHER


def _mem(total=10_000, ps=1):
    return KVMemory.build(max_running_requests=16, max_context_len=20_000,
                          max_total_tokens=total, page_size=ps)


def _req(rid, n, max_new=8, first=1, outputs=()):
    r = Req(rid, list(range(first, first + n)), SamplingParams(max_new_tokens=max_new))
    r.output_ids.extend(outputs)
    return r


def _adder(mem, running=(), ratio=1.0, max_prefill=16384, chunk=None, mixed=0):
    return PrefillAdder(mem, list(running), ratio, max_prefill, chunk, mixed)


def _offer(adder, req):
    req.init_next_round_input(adder.mem.tree_cache)
    return adder.add_one_req(req)


def _cache_prefix(mem, tokens):
    """Put `tokens` into the radix cache as if an earlier request had computed them."""
    slots = mem.allocator.alloc(len(tokens))
    mem.tree_cache.insert(tokens, slots)


# --- budgets ---------------------------------------------------------------------------


def test_mixed_chunk_prefill_budgets():
    """SGLang's test: 8 decodes of max_new 50, M = 8: input 200 -> 192, chunk 64 -> 56,
    offset 8 + 400 = 408; one 20-token request (max_new 10) then takes its share."""
    running = [_req(f"d{i}", 5, max_new=50) for i in range(8)]
    adder = _adder(_mem(), running, ratio=1.0, max_prefill=200, chunk=64, mixed=8)
    assert (adder.rem_input_tokens, adder.rem_chunk_tokens) == (192, 56)
    assert adder.rem_total_token_offset == 408 and adder.cur_rem_token_offset == 8
    assert adder.rem_total_tokens == 10_000 - 408
    assert adder.budget_state() == CONTINUE
    assert _offer(adder, _req("new", 20, max_new=10)) == CONTINUE
    assert (adder.rem_input_tokens, adder.rem_chunk_tokens) == (172, 36)
    assert adder.rem_total_token_offset == 408 + 20 + 10 + 1
    assert adder.cur_rem_token_offset == 8 + 20 + 1


@given(specs=st.lists(st.tuples(st.integers(1, 6000), st.integers(0, 6)), max_size=6),
       ratio=st.sampled_from((0.098, 0.5, 0.7, 1.0)), mixed=st.integers(0, 6))
def test_running_requests_reserve_their_clipped_remaining_tokens(specs, ratio, mixed):
    """offset = M + sum(min(max_new - outputs, 4096) * new_token_ratio)."""
    running = [_req(f"r{i}", 3, max_new=m, outputs=[7] * min(o, m)) for i, (m, o) in enumerate(specs)]
    adder = _adder(_mem(), running, ratio=ratio, mixed=mixed)
    want = mixed + sum(min(m - min(o, m), 4096) * ratio for m, o in specs)
    assert adder.rem_total_token_offset == pytest.approx(want)


@pytest.mark.parametrize(("kwargs", "want"), [
    (dict(), CONTINUE),
    (dict(max_prefill=8, mixed=8), OTHER),                        # rem_input_tokens == 0
    (dict(chunk=8, mixed=8), OTHER),                              # rem_chunk_tokens == 0
    (dict(running=[_req("big", 3, max_new=150)]), NO_TOKEN),      # reserve > A + E
    (dict(mixed=100), NO_TOKEN),                                  # cur_rem_tokens == 0
    (dict(max_prefill=8, mixed=100), NO_TOKEN),                   # NO_TOKEN before OTHER
])
def test_budget_state_names_the_first_exhausted_budget(kwargs, want):
    """NO_TOKEN when KV runs out, else OTHER when input/chunk budget does, else CONTINUE."""
    assert _adder(_mem(total=100), **kwargs).budget_state() == want


def test_first_request_is_admitted_even_above_max_prefill_tokens():
    """Without chunking a 50-token request fits a 16-token prefill budget alone; the next
    one is refused with OTHER."""
    adder = _adder(_mem(), max_prefill=16)
    first, second = _req("a", 50), _req("b", 1, first=60)
    assert _offer(adder, first) == OTHER
    assert _offer(adder, second) == OTHER
    assert adder.can_run_list == [first] and first.extend_input_len == 50
    assert adder.new_chunked_req is None


@pytest.mark.parametrize(("ps", "first_len", "want_trunc"), [
    (1, 0, 10), (4, 0, 8), (1, 3, 7), (4, 3, 4),
])
def test_a_request_above_the_chunk_budget_becomes_the_chunked_request(ps, first_len, want_trunc):
    """It is truncated to floor(rem_chunk / page_size) * page_size and set as new_chunked_req."""
    adder = _adder(_mem(ps=ps), chunk=10)
    if first_len:
        assert _offer(adder, _req("small", first_len, first=100)) == CONTINUE
    big = _req("big", 30)
    chunk_before, offset_before = adder.rem_chunk_tokens, adder.rem_total_token_offset
    _offer(adder, big)
    assert adder.new_chunked_req is big and adder.can_run_list[-1] is big
    assert big.extend_input_len == want_trunc
    assert big.fill_ids.tolist() == big.origin_input_ids[:want_trunc]
    assert adder.rem_chunk_tokens == chunk_before - want_trunc
    assert adder.rem_total_token_offset == offset_before + want_trunc + 0 + ps  # no decode reserve


def test_no_whole_page_left_in_the_chunk_budget_refuses_with_other():
    """ps 4, chunk 10, a 7-token request first (8 paged): 2 left < one page -> OTHER."""
    adder = _adder(_mem(ps=4), chunk=10)
    assert _offer(adder, _req("small", 7, first=100)) == CONTINUE
    big = _req("big", 30)
    assert _offer(adder, big) == OTHER
    assert adder.new_chunked_req is None and big not in adder.can_run_list


@given(n=st.integers(1, 60), max_new=st.integers(1, 60), slack=st.integers(-2, 3))
def test_a_request_that_would_not_fit_with_its_decode_gets_no_token(n, max_new, slack):
    """extend + min(max_new, 4096) + page_size >= rem_total_tokens -> NO_TOKEN, else admitted."""
    total = n + max_new + 1 + slack               # the whole pool is free: rem_total == total
    adder = _adder(_mem(total=total))
    req = _req("r", n, max_new=max_new)
    res = _offer(adder, req)
    assert (res == NO_TOKEN) == (n + max_new + 1 >= total)
    assert (req in adder.can_run_list) == (res != NO_TOKEN)


def test_the_decode_reservation_is_clipped_at_4096():
    """max_new 10000 counts as 4096: 10 + 4096 + 1 < 5000 admits the request."""
    adder = _adder(_mem(total=5000))
    assert _offer(adder, _req("r", 10, max_new=10_000)) == CONTINUE
    assert adder.rem_total_token_offset == 10 + 4096 + 1


# --- locks -----------------------------------------------------------------------------


def test_admitted_requests_lock_their_prefix_and_refused_ones_leave_no_lock():
    """Admission locks last_node (protected size grows); an OTHER refusal leaves none."""
    mem = _mem()
    _cache_prefix(mem, list(range(1, 21)))
    _cache_prefix(mem, list(range(100, 116)))
    cache = mem.tree_cache
    adder = _adder(mem, max_prefill=20)
    a, b = _req("a", 30, first=1), _req("b", 40, first=100)
    assert _offer(adder, a) == CONTINUE
    assert cache.protected_size() == 20 and cache.evictable_size() == 16
    assert _offer(adder, b) == OTHER                # 24 extend tokens > 10 left
    assert len(b.prefix_indices) == 16 and b.last_node.lock_ref == 0
    assert cache.protected_size() == 20 and cache.evictable_size() == 16


def test_a_no_token_refusal_under_the_temporary_lock_releases_it():
    """Locking the prefix removes it from E; the re-check then refuses, and unlocks."""
    mem = _mem(total=100)
    _cache_prefix(mem, list(range(1, 21)))          # A = 80, E = 20
    adder = _adder(mem)
    req = _req("r", 30, max_new=80, first=1)        # 10 + 80 + 1 = 91: < 100, >= 80
    assert _offer(adder, req) == NO_TOKEN
    assert len(req.prefix_indices) == 20 and req.last_node.lock_ref == 0
    assert mem.tree_cache.protected_size() == 0 and mem.tree_cache.evictable_size() == 20
    assert adder.can_run_list == []


# --- add_chunked_req -------------------------------------------------------------------


@pytest.mark.parametrize("ps", [1, 4])
def test_add_chunked_req_returns_the_request_until_its_last_chunk(ps):
    """Chunks of 10 (not page-aligned) over a 25-token prompt: req, req, then None; each
    chunk charged page-rounded (SGLang's _update_prefill_budget ceils every extend)."""
    req = _req("c", 25, max_new=30)
    results = []
    for computed in (0, 10, 20):
        req.prefix_indices = np.arange(1, computed + 1, dtype=np.int64)
        req.init_next_round_input(None)
        adder = _adder(_mem(ps=ps), chunk=10)
        results.append(adder.add_chunked_req(req))
        assert adder.can_run_list == [req]
        last = computed == 20
        assert req.extend_input_len == (5 if last else 10)
        assert req.fill_ids.tolist() == req.origin_input_ids[: computed + req.extend_input_len]
        reserve = 30 if last else 0
        charged = -(-req.extend_input_len // ps) * ps
        assert adder.rem_total_token_offset == charged + reserve + ps
    assert results == [req, req, None]


# --- NewTokenRatio ---------------------------------------------------------------------


@pytest.mark.parametrize(("cons", "init"), [(1.0, 0.7), (0.5, 0.35), (1.3, 0.91), (2.0, 1.0)])
def test_new_token_ratio_starts_at_0_7_times_conservativeness_capped_at_1(cons, init):
    """init = min(0.7 * c, 1); min = init * 0.14; the value starts at init."""
    r = NewTokenRatio(cons)
    assert r.init == pytest.approx(init) and r.value == r.init
    assert r.min == pytest.approx(init * 0.14)


@given(cons=st.floats(0.05, 3.0), steps=st.integers(0, 800))
def test_new_token_ratio_decays_linearly_to_its_floor(cons, steps):
    """Each decode subtracts (init - min) / 600, never going below min."""
    r = NewTokenRatio(cons)
    for _ in range(steps):
        r.on_decode()
    want = max(r.init - steps * (r.init - r.min) / 600, r.min)
    assert r.value == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert r.value >= r.min
    if steps > 610:
        assert r.value == r.min


@pytest.mark.parametrize(("decoded", "max_new", "bs", "want"), [
    (30, 200, 4, (30 + 80) / 201), (5, 99, 2, 45 / 100),
    (500, 100, 1, 1.0), (0, 10_000, 3, 60 / 10_001),
])
def test_on_retract_reestimates_from_the_remaining_requests(decoded, max_new, bs, want):
    """ratio = min(1, (decoded + 20 * bs) / (sum max_new + 1))."""
    r = NewTokenRatio()
    r.on_retract(decoded, max_new, bs)
    assert r.value == pytest.approx(want)


def test_on_idle_resets_the_ratio_to_init():
    """After decay and a retraction, going idle restores the initial ratio."""
    r = NewTokenRatio(0.8)
    for _ in range(50):
        r.on_decode()
    assert r.value < r.init
    r.on_retract(3, 1000, 2)
    r.on_idle()
    assert r.value == r.init


@given(cons=st.floats(0.05, 3.0), steps=st.integers(0, 800))
def test_guaranteed_no_evict_holds_the_ratio_at_one(cons, steps):
    """TensorRT-LLM's GUARANTEED_NO_EVICT: the ratio starts at 1.0 whatever the
    conservativeness and stays there through decodes, a retraction and idling."""
    r = NewTokenRatio(cons, guaranteed_no_evict=True)
    for _ in range(steps):
        r.on_decode()
    r.on_retract(3, 1000, 2)
    assert r.value == 1.0
    r.on_idle()
    assert r.value == r.init == r.min == 1.0
