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
def kv_pressure_cases(draw):
    """An engine config with a small KV pool and a workload that outgrows it: a long decode
    (a short prompt, most of the pool as output), then a request arriving one step later
    that nearly fills what is left beside it, then 0-3 more of any size; so with a low
    schedule_conservativeness decodes, chunks and mixed steps run out of KV and must
    retract. Each request fits the pool alone (prompt + max_new_tokens + page_size < pool)
    but one now and then. Page sizes 1..16 (1 and 2 more often), chunking and mixing on or
    off, either schedule, radix cache on or off. A request: (prompt, max_new_tokens,
    arrival, ignore_eos); unless ignore_eos is set and the radix cache off (an exact
    admission), admission over-admits."""
    ps = draw(st.sampled_from((1, 1, 2, 2, 4)) | st.integers(1, 16))
    pool = ps * draw(st.integers(max(3, -(-24 // ps)), max(4, 96 // ps)))
    p0 = draw(st.integers(1, 4))
    max_new0 = pool - ps - 1 - p0 - draw(st.integers(0, pool // 4))
    reqs = [([1] * p0, max_new0, 0.0, draw(st.booleans()))]
    top = max(2, pool - ps - 3 - p0)  # NOTE: what is left beside the first prompt and token
    sizes = [top - draw(st.integers(0, max(0, min(top - 2, pool // 6))))]
    sizes += [draw(st.integers(2, top)) for _ in range(draw(st.integers(0, 3)))]
    arrival = 0.0
    for size in sizes:
        if draw(st.integers(0, 9)) == 9:
            size = pool - ps + draw(st.integers(0, 8))  # does not fit the pool alone
        # NOTE: the prompt or the output short: a decode beside a long chunked prompt
        short = draw(st.integers(1, min(size - 1, 8)) | st.integers(1, size - 1))
        n = size - short if draw(st.booleans()) else short
        arrival += draw(st.sampled_from((0.01, 0.02, 0.0)))
        pattern = draw(st.lists(st.integers(1, 3), min_size=1, max_size=6))  # shared prefixes
        reqs.append(((pattern * n)[:n], size - n, arrival, draw(st.booleans())))
    chunk = draw(st.sampled_from((4, 4, 8, 16, None)))
    config = dict(
        page_size=ps, max_total_tokens=pool,
        chunked_prefill_size=None if chunk is None else max(chunk, ps),
        enable_mixed_chunk=draw(st.sampled_from((True, True, False))),
        schedule_policy=draw(st.sampled_from(("fcfs", "lpm"))),
        schedule_conservativeness=draw(st.sampled_from((0.01, 0.01, 0.05, 1.0))),
        disable_radix_cache=draw(st.booleans()), disable_cuda_graph=True,
        disable_overlap_schedule=draw(st.booleans()))
    return config, reqs


@st.composite
def length_dists(draw, max_len: int = 64):
    """Any prompt/output length distribution (shared.workload.length_dist), small lengths."""
    from shared.workload.length_dist import Empirical, Fixed, LogNormal, Uniform

    low = draw(st.integers(-2, max_len))
    kinds = (
        st.builds(Fixed, st.integers(-2, max_len)),
        st.builds(Uniform, st.just(low), st.integers(low, max_len)),
        st.builds(LogNormal, st.floats(0.5, max_len), st.floats(0.0, 2.0),
                  st.one_of(st.none(), st.integers(1, max_len))),
        st.builds(Empirical, st.lists(st.integers(-2, max_len), min_size=1, max_size=8).map(tuple)),
    )
    return draw(st.one_of(kinds))


# Vocabulary sizes for numpy's bounded draws: no draw (1), no rejection (powers of two, 2**32),
# rare and frequent rejection of 32-bit words (just above a power of two), 64-bit draws above
# 2**32 (rejecting up to a quarter at 3 * 2**61).
vocab_sizes = st.one_of(
    st.sampled_from((1, 2, 3, 7, 256, 1000, 50257, 128256, 2**16 + 1, 2**31 - 1, 2**31,
                     2**31 + 1, 2**32 - 1, 2**32, 2**32 + 1, 2**40 + 3, 3 * 2**61, 2**63 - 1)),
    st.integers(1, 2**20), st.integers(1, 2**63 - 1))


def token_pieces(max_pieces: int = 12, max_len: int = 40) -> st.SearchStrategy[list[int]]:
    """Piece lengths for a token stream: empty pieces included, sometimes none at all."""
    return st.lists(st.integers(0, max_len), max_size=max_pieces)


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


# --- token streams of simulated runs (tests/test_sim_itl.py, test_sim_disaggregation.py) -------

@st.composite
def stream_workloads(draw, vocab_size: int, max_requests: int = 4, max_new_tokens: int = 8):
    """A few short requests arriving close together (one after another or at once) whose
    streams may end early: stop ids and EOS honoured (or ignored), min_new_tokens, one-token
    requests."""
    from shared import SamplingParams, Workload
    from shared.workload.workload import WorkloadRequest

    reqs, arrival = [], 0.0
    for i in range(draw(st.sampled_from(range(1, max_requests + 1)))):
        prompt = draw(st.lists(st.integers(0, vocab_size - 1), min_size=1, max_size=12))
        max_new = draw(st.sampled_from(range(max_new_tokens, 0, -1)))   # long ones first
        stop = draw(st.one_of(st.none(), st.lists(st.integers(0, vocab_size - 1), min_size=1,
                                                  max_size=2)))
        params = SamplingParams(max_new_tokens=max_new,
                                ignore_eos=draw(st.sampled_from((False, False, True))),
                                stop_token_ids=stop,
                                min_new_tokens=min(draw(st.integers(0, 2)), max_new))
        arrival += draw(st.sampled_from((2e-3, 1e-3, 0.0, 2e-2)))
        reqs.append(WorkloadRequest(f"r{i}", arrival, tuple(prompt), params))
    return Workload(tuple(reqs))


@st.composite
def small_engine_args(draw, workload) -> dict:
    """EngineConfig fields for a tiny run of `workload` (the schedule left to the test):
    prefill chunks, mixed chunks, and a KV pool from just enough for its largest request
    alone (so retractions happen) to ample."""
    need = max(len(r.input_ids) + r.sampling_params.max_new_tokens for r in workload) + 2
    return {"max_total_tokens": need + draw(st.sampled_from((8, 4, 16, 0, 2048))),
            "chunked_prefill_size": draw(st.sampled_from((None, 4, 8))),
            "enable_mixed_chunk": draw(st.booleans()),
            "schedule_conservativeness": draw(st.sampled_from((0.05, 1.0)))}


@st.composite
def disagg_layouts(draw, max_prefill: int = 2, max_decode: int = 3) -> dict:
    """Disaggregated layouts: xPyD, the KV link (free to slow) and both routers."""
    import math

    from sim.fleet.disagg_layout import Disaggregated
    from sim.routers import ROUTERS

    routers = st.sampled_from(sorted(ROUTERS))
    return Disaggregated(prefill=draw(st.integers(1, max_prefill)),
                         decode=draw(st.integers(1, max_decode)),
                         kv_link_latency=draw(st.sampled_from((0.0, 1e-5, 2e-3))),
                         kv_link_bandwidth=draw(st.sampled_from((math.inf, 1e9, 1e6))),
                         prefill_router=draw(routers), decode_router=draw(routers))


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
def engine_call(draw, rids: tuple[str, ...] = ("r0", "r1", "r2")) -> tuple:
    """One call a server's thread makes on an online engine: ("submit", rid, prompt,
    max_new_tokens) (1 in 8 prompts empty: refused), ("abort", rid) or, 1 call in 6,
    ("stop",). Few rids, so that aborts find their request and twins share a rid."""
    kind = draw(st.sampled_from(("submit", "submit", "submit", "abort", "abort", "stop")))
    rid = draw(st.sampled_from(rids))
    if kind == "stop":
        return ("stop",)
    if kind == "abort":
        return ("abort", rid)
    tokens = st.lists(st.integers(1, 60), min_size=1, max_size=4)
    prompt = [] if draw(st.integers(0, 7)) == 5 else draw(tokens)
    return ("submit", rid, prompt, draw(st.integers(1, 3)))


def engine_call_plans(max_threads: int = 4, max_calls: int = 4) -> st.SearchStrategy[list[list[tuple]]]:
    """2..max_threads threads, each with the 1..max_calls `engine_call`s it makes in order."""
    return st.lists(st.lists(engine_call(), min_size=1, max_size=max_calls),
                    min_size=2, max_size=max_threads)


# --- cost models: batches that gain work (tests/test_sim_cost_model_monotone.py) -----------

TILE_EDGE_LENGTHS = st.builds(lambda tiles, off: 128 * tiles + off,
                              st.integers(1, 16), st.integers(-1, 1))
# NOTE: extend lengths at FlashAttention's 128-row query-tile edges as often as anywhere else.
extend_lengths = st.one_of(st.integers(1, 2048), TILE_EDGE_LENGTHS)
prefix_lengths = st.one_of(st.just(0), st.integers(0, 4096), TILE_EDGE_LENGTHS)
GROWTHS = {"DECODE": ("kv_token", "request"),
           "EXTEND": ("extend_token", "kv_token", "request"),
           "MIXED": ("extend_token", "kv_token", "request")}


@st.composite
def batch_growths(draw):
    """(what grew, a BatchShape, the same batch with more work): a decode batch (graph padded
    or not, sizes around the CUDA-graph limit 160 too) gains a KV token in one request or one
    more request; an extend or mixed batch (mixed: with 1-token decode rows) gains a new token
    in one request, a cached-prefix token in one request, or one more request. Every request
    gives one LM-head row."""
    from sim.cost.batch_shape import BatchShape

    mode = draw(st.sampled_from(sorted(GROWTHS)))
    growth = draw(st.sampled_from(GROWTHS[mode]))
    if mode == "DECODE":
        size = draw(st.one_of(st.integers(1, 8), st.integers(156, 164)))
        reqs = [(s - 1, 1) for s in draw(st.lists(st.integers(1, 8192), min_size=size,
                                                  max_size=size))]
        new = (draw(st.integers(1, 8192)) - 1, 1)
    else:
        reqs = draw(st.lists(st.tuples(prefix_lengths, extend_lengths), min_size=1, max_size=4))
        if mode == "MIXED":
            reqs += [(p, 1) for p in draw(st.lists(st.integers(1, 8192), max_size=4))]
        new = draw(st.tuples(prefix_lengths, extend_lengths | st.just(1)))
    padded = len(reqs) + (draw(st.integers(0, 8)) if mode == "DECODE" else 0)
    grown, at = list(reqs), draw(st.integers(0, len(reqs) - 1))
    prefix, extend = grown[at]
    if growth == "request":
        grown.append(new)
    else:
        grown[at] = (prefix + (growth == "kv_token"), extend + (growth == "extend_token"))

    def shape(rs):
        return BatchShape.build(mode, [p + e for p, e in rs], [p for p, _ in rs],
                                padded_batch_size=max(padded, len(rs)))
    return growth, shape(reqs), shape(grown)


def cost_model_keys() -> list[tuple[str, str, int]]:
    """Every (embedded model, catalogue chip, tp in 1, 2, 4, 8) whose tp the model can shard
    (`sim.model.parallelism.check_tp`)."""
    from sim.hardware.lookup import hardware_catalogue
    from sim.model.embedded_configs import EMBEDDED_CONFIGS
    from sim.model.from_config import get_model_shape

    keys = []
    for model in EMBEDDED_CONFIGS:
        shape = get_model_shape(model)
        tps = [tp for tp in (1, 2, 4, 8) if shape.num_heads % tp == 0
               and (shape.num_kv_heads % tp == 0 or tp % shape.num_kv_heads == 0)]
        keys += [(model, chip, tp) for chip in hardware_catalogue() for tp in tps]
    return keys


# --- workloads of every generator (tests/test_sim_fleet.py) -----------------------------------

# Engine settings that change when steps start and end: the overlap schedule, chunked and
# mixed prefill, a running-batch cap.
timing_engine_args = st.fixed_dictionaries({
    "disable_overlap_schedule": st.booleans(),
    "chunked_prefill_size": st.sampled_from((None, 8, 16)), "enable_mixed_chunk": st.booleans(),
    "max_running_requests": st.sampled_from((None, 2))})

# NOTE: rates around the tiny model's step rate (~1 ms a step), so arrivals land both while
# the engine works and while it idles; inf: everything at t=0.
rates = st.one_of(st.just(float("inf")), st.floats(1.0, 200.0), st.floats(200.0, 3000.0))
# 1: Poisson; other shapes: gamma (burstier below 1); inf: a fixed rate.
burstinesses = st.one_of(st.just(1.0), st.floats(0.1, 10.0), st.just(float("inf")))


def _upto(hi: int) -> st.SearchStrategy[int]:
    return st.integers(1, hi)


@st.composite
def _recorded(draw, vocab_size: int):
    """A recorded or saved workload (`Workload.from_jsonl`, a trace's requests): arrival
    times as a log writes them, whole ticks (0.1 ms, 1 ms, ...) from the start, not the
    sums of gaps a generator makes."""
    from shared import SamplingParams, Workload, WorkloadRequest

    tick = draw(st.sampled_from((1e-4, 1e-3, 0.01, 0.1)))
    ticks = draw(st.lists(st.integers(0, 60), min_size=1, max_size=6))
    prompts = st.lists(st.integers(0, vocab_size - 1), min_size=1, max_size=12)
    return Workload(tuple(WorkloadRequest(f"r{i}", k * tick, tuple(draw(prompts)),
                                          SamplingParams(max_new_tokens=draw(_upto(4)),
                                                         ignore_eos=True))
                          for i, k in enumerate(ticks)), name="recorded")


def generator_workloads(model_info) -> st.SearchStrategy:
    """A few short requests from any workload generator of shared/ and sim/: synthetic
    (all at t=0, Poisson, gamma or fixed-rate arrivals), ShareGPT-like, generated shared
    prefix, multi-tenant, open-loop multi-turn, closed-loop sessions (follow-up turns sent
    a think time after each reply, 0 included), a recorded workload, and the conformance
    kit's (`sim.conformance.strategies`: EOS, stop tokens, seeded sampling). Outputs are
    short, so the engine often idles between arrivals."""
    from shared import MultiTenant, MultiTurn, Sessions, SharedPrefix, ShareGPTLike, Synthetic
    from sim.conformance.strategies import workloads

    arrivals = {"vocab_size": st.just(model_info.vocab_size), "seed": st.integers(0, 2**16),
                "rate": rates, "burstiness": burstinesses}

    def built(specs: st.SearchStrategy) -> st.SearchStrategy:
        """The workload a drawn generator spec builds, at drawn arrivals and seed."""
        return st.builds(lambda spec, **kw: spec.build(**kw), specs, **arrivals)
    # NOTE: think times near the replies' (a few ms) make sleeps from a reply to a turn
    # that span a few binades, where one timeout(t - now) can miss t
    think_times = st.one_of(st.just(0.0), st.floats(0.0, 0.01), st.floats(0.0, 2.0))
    return st.one_of(
        built(st.builds(Synthetic, _upto(6), _upto(16), _upto(4))),
        built(st.builds(ShareGPTLike, _upto(6), prompt_median=st.floats(1.0, 12.0),
                        output_median=st.floats(1.0, 4.0), max_len=st.just(32))),
        built(st.builds(SharedPrefix, _upto(2), _upto(3), _upto(12), _upto(6), _upto(4))),
        built(st.builds(MultiTenant, _upto(6), _upto(3), _upto(12), _upto(6), _upto(4),
                        zipf=st.floats(0.0, 2.0))),
        built(st.builds(MultiTurn, _upto(2), _upto(3), user_len=_upto(8),
                        output_len=_upto(4), think_time=think_times)),
        built(st.builds(Sessions, _upto(3), _upto(4), user_len=_upto(8),
                        output_len=_upto(4), think_time=think_times)),
        _recorded(model_info.vocab_size),
        workloads(model_info, max_requests=6, max_prompt_len=12, max_output_len=4),
    )


# --- min_new_tokens and stop_token_ids (tests/test_min_new_tokens.py) -------------------------

@st.composite
def stop_params(draw, vocab_size: int, max_new_tokens: int) -> dict:
    """SamplingParams keywords that make stop ids likely: stop_token_ids a run of ids (up to
    the whole vocabulary, EOS 0 included) plus a few others, never one id `keep` (>= 1, so a
    token can always be drawn before min_new_tokens); min_new_tokens in [0, max_new_tokens];
    ignore_eos now and then; greedy or sampled."""
    keep = draw(st.integers(1, vocab_size - 1))
    start, n = draw(st.integers(0, vocab_size - 1)), draw(st.integers(0, vocab_size))
    stops = {(start + i) % vocab_size for i in range(n)}
    stops |= set(draw(st.lists(st.integers(0, vocab_size - 1), max_size=3)))
    stops.discard(keep)
    return {"max_new_tokens": max_new_tokens,
            "min_new_tokens": draw(st.integers(0, max_new_tokens)),
            "stop_token_ids": sorted(stops), "ignore_eos": draw(st.integers(0, 4)) == 0,
            "temperature": draw(st.sampled_from((0.0, 1.0))),
            "sampling_seed": draw(st.integers(0, 2**16))}


@st.composite
def stop_token_cases(draw, vocab_size: int):
    """A scheduler case (`scheduler_cases`) whose requests carry `stop_params`."""
    config, reqs = draw(scheduler_cases())
    return config, [(prompt, draw(stop_params(vocab_size, max_new)), arrival)
                    for prompt, max_new, arrival in reqs]


@st.composite
def dense_decode_cases(draw, max_batch: int = 512, max_seq_len: int = 16384):
    """(model key, hardware key, tp, batch, seq_len, overlap): a plain decode step of `batch`
    requests of `seq_len` tokens each of a dense embedded model on a catalogue chip, at a tp
    in 1, 2, 4, 8 that shards it, that the engine can hold (weights and the batch's KV within
    `sim.model.kv_capacity.kv_capacity_tokens`), under either schedule. NOTE: both cost models price
    a decode step by its rows and KV total, so one length per step loses nothing."""
    from hypothesis import assume

    from sim.hardware.lookup import hardware_catalogue
    from sim.model.from_config import EMBEDDED_CONFIGS, get_model_shape
    from sim.model.kv_capacity import kv_capacity_tokens

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
    """Whether tp shards the model's heads (`sim.model.parallelism.check_tp`)."""
    from sim.model.parallelism import check_tp

    try:
        check_tp(tp, shape)
    except ValueError:
        return False
    return True
