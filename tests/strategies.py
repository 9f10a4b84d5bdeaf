"""Hypothesis strategies shared by the test modules."""

from hypothesis import strategies as st

PAGE_SIZES = (1, 2, 4, 16)

page_sizes = st.sampled_from(PAGE_SIZES)
small_page_sizes = st.sampled_from((1, 2, 4))


def token_keys(max_len: int = 16, alphabet: int = 3) -> st.SearchStrategy[list[int]]:
    """Short token lists over a tiny alphabet, so that prefixes collide often."""
    return st.lists(st.integers(0, alphabet - 1), max_size=max_len)


def prompts(max_len: int = 24, alphabet: int = 3) -> st.SearchStrategy[list[int]]:
    """Non-empty prompts over a tiny alphabet (shared prefixes are common)."""
    return st.lists(st.integers(0, alphabet - 1), min_size=1, max_size=max_len)


@st.composite
def scheduler_cases(draw):
    """An engine config plus a workload of requests with shared prefixes, all within the
    validation limits. KV capacity ranges from just enough for the largest request alone
    to comfortable, so admission limits and retraction are exercised."""
    ps = draw(st.sampled_from((1, 2, 4, 16)))
    bases = draw(st.lists(st.lists(st.integers(1, 9), min_size=1, max_size=24), min_size=1, max_size=3))
    n = draw(st.integers(1, 8))
    reqs = []
    for _ in range(n):
        base = draw(st.sampled_from(bases))
        cut = draw(st.integers(0, len(base)))
        suffix = draw(st.lists(st.integers(1, 9), min_size=0 if cut else 1, max_size=16))
        max_new = draw(st.integers(1, 40))
        arrival = draw(st.sampled_from((0.0, 0.0, 0.03, 0.1, 0.2)))
        reqs.append((base[:cut] + suffix, max_new, arrival))
    need = max(len(p) + m + ps for p, m, _ in reqs) + 1
    capacity = -(-(need + draw(st.integers(0, 96))) // ps) * ps
    chunk = draw(st.sampled_from((None, 16, 32, 64)))
    config = dict(
        page_size=ps, max_total_tokens=max(capacity, 2 * ps),
        chunked_prefill_size=chunk if chunk is None or chunk >= ps else ps,
        enable_mixed_chunk=draw(st.booleans()), schedule_policy=draw(st.sampled_from(("fcfs", "lpm"))),
        max_running_requests=draw(st.sampled_from((None, 2, 4))),
        max_prefill_tokens=draw(st.sampled_from((16384, 48))),
        schedule_conservativeness=draw(st.sampled_from((1.0, 0.05, 0.01))),
        disable_radix_cache=draw(st.booleans()), disable_cuda_graph=True,
        disable_overlap_schedule=draw(st.booleans()))
    return config, reqs


@st.composite
def length_dists(draw, max_len: int = 64):
    """Any prompt/output length distribution (shared.length_dist), small lengths."""
    from shared.length_dist import Empirical, Fixed, LogNormal, Uniform

    low = draw(st.integers(-2, max_len))
    kinds = (
        st.builds(Fixed, st.integers(-2, max_len)),
        st.builds(Uniform, st.just(low), st.integers(low, max_len)),
        st.builds(LogNormal, st.floats(0.5, max_len), st.floats(0.0, 2.0),
                  st.one_of(st.none(), st.integers(1, max_len))),
        st.builds(Empirical, st.lists(st.integers(-2, max_len), min_size=1, max_size=8).map(tuple)),
    )
    return draw(st.one_of(kinds))


@st.composite
def token_timelines(draw, max_requests: int = 4, max_tokens: int = 5):
    """Per request: (arrival tick, ticks at which its tokens are sampled), ticks ascending.

    A tick is 0.25 s, so every time is exact in binary floating point."""
    timelines = []
    for _ in range(draw(st.integers(1, max_requests))):
        arrival = draw(st.integers(0, 20))
        gaps = draw(st.lists(st.integers(1, 6), min_size=1, max_size=max_tokens))
        ticks, t = [], arrival
        for g in gaps:
            t += g
            ticks.append(t)
        timelines.append((arrival, ticks))
    return timelines
