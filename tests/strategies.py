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
        disable_overlap_schedule=draw(st.booleans()),
        guaranteed_no_evict=draw(st.booleans()))
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


# --- fuzzing bad input (tests/test_fuzz_requests.py) ------------------------------------------

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 40), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4))
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.one_of(st.text(max_size=3), st.integers(-2, 300)), inner, max_size=3),
    max_leaves=6)

# NOTE: plausible values keep most requests valid and short; json_values break them. A rare
# branch is taken on a middle value of st.integers (Hypothesis favours 0 and the bounds).
PLAUSIBLE_PARAMS = {
    "temperature": st.sampled_from((0.0, 0.0, 0.7, 1.0)),
    "top_p": st.floats(0.1, 1.0), "top_k": st.sampled_from((-1, 1, 5, 2**63)),
    "min_p": st.floats(0.0, 0.5), "frequency_penalty": st.floats(-1.0, 1.0),
    "presence_penalty": st.floats(-1.0, 1.0), "repetition_penalty": st.floats(0.5, 1.5),
    "min_new_tokens": st.integers(0, 3), "n": st.just(1), "ignore_eos": st.booleans(),
    "stop_token_ids": st.lists(st.integers(0, 255), max_size=2),
    "logit_bias": st.dictionaries(st.integers(0, 255), st.floats(-100, 100), max_size=2),
    "sampling_seed": st.integers(0, 2**32), "return_logprob": st.booleans(),
    "logprob_start_len": st.integers(-1, 4), "top_logprobs_num": st.integers(0, 3),
}


@st.composite
def fuzz_sampling_params(draw, max_new_tokens: int = 6) -> dict:
    """A sampling-params dict as a client might send it: known keys with plausible or
    arbitrary JSON-like values, now and then an unknown key; max_new_tokens always set
    (small, or arbitrary) so that accepted requests stay short."""
    junk = st.one_of(json_values, st.integers(-(2**70), 2**70))
    d = {"max_new_tokens": draw(junk if draw(st.integers(0, 5)) == 2 else st.integers(1, max_new_tokens))}
    for key in draw(st.lists(st.sampled_from(sorted(PLAUSIBLE_PARAMS)), max_size=4, unique=True)):
        d[key] = draw(junk if draw(st.integers(0, 5)) == 2 else PLAUSIBLE_PARAMS[key])
    if draw(st.integers(0, 15)) == 7:
        d[draw(st.text(min_size=1, max_size=5))] = draw(json_values)
    return d


@st.composite
def fuzz_prompts(draw, vocab_size: int, max_len: int = 12):
    """Token-id prompts, mostly valid; sometimes empty, out of the vocabulary, or holding
    floats, bools, strings, bytes or nested lists."""
    good = st.lists(st.integers(0, vocab_size - 1), min_size=1, max_size=max_len)
    if draw(st.integers(0, 5)) != 2:
        return draw(good)
    token = st.one_of(st.integers(-5, vocab_size + 5), st.floats(), st.booleans(),
                      st.text(max_size=2), st.lists(st.integers(0, 3), max_size=2))
    return draw(st.one_of(st.lists(token, max_size=max_len), st.binary(max_size=4), json_scalars))


def fuzz_requests(vocab_size: int) -> st.SearchStrategy:
    """1-3 (prompt, sampling-params dict, abort_after) triples; abort_after: abort the request
    after that many streamed chunks (None: never)."""
    return st.lists(st.tuples(fuzz_prompts(vocab_size), fuzz_sampling_params(),
                              st.one_of(st.none(), st.none(), st.integers(0, 3))),
                    min_size=1, max_size=3)


@st.composite
def dense_decode_cases(draw, max_batch: int = 512, max_seq_len: int = 16384):
    """(model key, hardware key, tp, batch, seq_len, overlap): a plain decode step of `batch`
    requests of `seq_len` tokens each of a dense embedded model on a catalogue chip, at a tp
    in 1, 2, 4, 8 that shards it, that the engine can hold (weights and the batch's KV within
    `sim.kv_capacity.kv_capacity_tokens`), under either schedule. NOTE: both cost models price
    a decode step by its rows and KV total, so one length per step loses nothing."""
    from hypothesis import assume

    from sim.hardware import hardware_catalogue
    from sim.kv_capacity import kv_capacity_tokens
    from sim.model_shapes import EMBEDDED_CONFIGS, get_model_shape

    model = draw(st.sampled_from(sorted(k for k in EMBEDDED_CONFIGS
                                        if get_model_shape(k).moe is None)))
    hardware = draw(st.sampled_from(sorted(hardware_catalogue())))
    shape = get_model_shape(model)
    tp = draw(st.sampled_from([tp for tp in (1, 2, 4, 8) if _shards(shape, tp)]))
    try:
        capacity = kv_capacity_tokens(shape, hardware_catalogue()[hardware], tp)
    except ValueError:   # the weights alone do not fit
        capacity = 0
    assume(capacity >= 1)
    batch = draw(st.integers(1, min(max_batch, capacity)))
    seq_len = draw(st.integers(1, min(max_seq_len, capacity // batch)))
    return model, hardware, tp, batch, seq_len, draw(st.booleans())


def _shards(shape, tp: int) -> bool:
    """Whether tp shards the model's heads (`sim.parallelism.check_tp`)."""
    from sim.parallelism import check_tp

    try:
        check_tp(tp, shape)
    except ValueError:
        return False
    return True
