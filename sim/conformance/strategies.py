"""Hypothesis strategies of the conformance kit: workloads and engine configs within the
validation limits (shared prefixes, page sizes, chunking, mixed chunk, policies, tight KV,
logprobs, greedy and seeded sampling, EOS). `sim.conformance` re-exports them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from hypothesis import strategies as st

from shared.config.engine_config import EngineConfig, ModelInfo
from shared.request.sampling_params import SamplingParams
from shared.workload.workload import Workload, WorkloadRequest


class ConformanceCase(NamedTuple):
    """One drawn example: an engine config, a workload and the model it is for."""

    config: EngineConfig
    workload: Workload
    model_info: ModelInfo


@st.composite
def sampling_params(draw, model_info: ModelInfo, prompt_len: int, max_output_len: int = 16, *,
                    temperature: bool = True, eos: bool = True, logprobs: bool = True):
    """Greedy or seeded temperature sampling; a request ends by length, EOS (sometimes
    biased up so it happens early) or a biased stop token; sometimes input logprobs."""
    kw: dict[str, Any] = {"max_new_tokens": draw(st.integers(1, max_output_len))}
    if temperature and draw(st.booleans()):
        kw.update(temperature=draw(st.sampled_from((0.6, 1.0, 1.4))),
                  top_k=draw(st.sampled_from((-1, 8))), top_p=draw(st.sampled_from((1.0, 0.9))),
                  sampling_seed=draw(st.integers(0, 2**31 - 1)))
    else:
        kw["temperature"] = 0.0
    ending = draw(st.sampled_from(("length", "eos", "eos-biased", "stop-token"))) if eos else "length"
    kw["ignore_eos"] = ending == "length" or not model_info.eos_token_ids
    if ending == "eos-biased" and model_info.eos_token_ids:
        kw["logit_bias"] = {model_info.eos_token_ids[0]: draw(st.sampled_from((3.0, 8.0, 30.0)))}
    elif ending == "stop-token":
        stop = draw(st.integers(0, model_info.vocab_size - 1))
        kw.update(stop_token_ids={stop}, logit_bias={stop: draw(st.sampled_from((3.0, 8.0)))})
    if logprobs and draw(st.integers(0, 9)) == 5:  # ~1 in 10 (Hypothesis favours the bounds)
        kw.update(return_logprob=True, logprob_start_len=draw(st.integers(-1, prompt_len)),
                  top_logprobs_num=draw(st.integers(0, 2)))
    return SamplingParams(**kw)


@st.composite
def workloads(draw, model_info: ModelInfo, *, max_requests: int = 12, max_prompt_len: int = 64,
              max_output_len: int = 16, arrival_tick: float = 1e-3, max_arrival_ticks: int = 40,
              **sampling: bool) -> Workload:
    """1..max_requests requests (rids r0, r1, ... in draw order): each prompt is a cut of one
    of up to three shared bases plus its own suffix (1..max_prompt_len tokens); arrivals are
    whole multiples of `arrival_tick` seconds (often 0). `sampling`: `sampling_params` flags."""
    limit = max(1, min(max_prompt_len, model_info.context_length - max_output_len - 1))
    token = st.integers(0, model_info.vocab_size - 1)
    tokens = lambda lo, hi: st.lists(token, min_size=lo, max_size=hi)  # noqa: E731
    bases = draw(st.lists(tokens(1, limit), min_size=1, max_size=3))
    arrival = st.integers(0, max_arrival_ticks)
    reqs = []
    for i in range(draw(st.integers(1, max_requests))):
        base = draw(st.sampled_from(bases))
        cut = draw(st.integers(0, len(base)))
        prompt = base[:cut] + draw(tokens(0 if cut else 1, limit - cut))
        params = draw(sampling_params(model_info, len(prompt), max_output_len, **sampling))
        reqs.append(WorkloadRequest(f"r{i}", draw(arrival) * arrival_tick, tuple(prompt), params))
    return Workload(tuple(reqs), name="conformance")


def min_total_tokens(workload: Workload, page_size: int) -> int:
    """The smallest KV pool (whole pages) every request of `workload` fits in alone."""
    need = max(len(r.input_ids) + r.sampling_params.max_new_tokens for r in workload)
    return max(-(-(need + page_size + 1) // page_size) * page_size, 2 * page_size)


@st.composite
def engine_configs(draw, workload: Workload | None = None, *, page_sizes: Sequence[int] = (1, 2, 4, 16),
                   chunk_sizes: Sequence[int | None] = (None, 8, 16, 32),
                   policies: Sequence[str] = ("fcfs", "lpm"), cuda_graph: bool | None = None,
                   min_tokens: int = 97) -> EngineConfig:
    """An engine config whose KV pool holds from just the largest request of `workload` (or
    `min_tokens`) alone up to all prompts, everything at once, or more, with eager admission
    (low `schedule_conservativeness`) sometimes, so that admission limits and retraction are
    exercised (and TensorRT-LLM's guaranteed-no-evict admission a quarter of the time).
    Chunk sizes below the page size are raised to it. Both schedules (overlap
    on and off) are drawn, and decode CUDA graphs on or off (`cuda_graph=None`; True or
    False fixes it): with graphs, `cuda_graph_max_bs` of 2, 4, 12 or the default, so decode
    batches are padded to a captured size or, above the largest, run eagerly."""
    ps = draw(st.sampled_from(page_sizes))
    need = min_total_tokens(workload, ps) if workload is not None else min_tokens
    reqs = () if workload is None else workload.requests
    prompts = sum(len(r.input_ids) + ps for r in reqs)
    everything = prompts + sum(r.sampling_params.max_new_tokens for r in reqs)
    # NOTE: `randoms` for the pool size, as Hypothesis's integers favour their bounds.
    top = draw(st.sampled_from((need + 16, prompts, everything, need + 512)))
    tokens = draw(st.randoms(use_true_random=False)).randint(need, max(need, top))
    chunk = draw(st.sampled_from(chunk_sizes))
    graphs = draw(st.booleans()) if cuda_graph is None else cuda_graph
    return EngineConfig(
        page_size=ps, max_total_tokens=-(-tokens // ps) * ps,
        chunked_prefill_size=None if chunk is None else max(chunk, ps),
        enable_mixed_chunk=draw(st.booleans()), schedule_policy=draw(st.sampled_from(policies)),
        max_running_requests=draw(st.sampled_from((None, None, 2, 4))),
        max_prefill_tokens=draw(st.sampled_from((16384, 64, 24))),
        schedule_conservativeness=draw(st.sampled_from((1.0, 0.3, 0.05, 0.01))),
        disable_radix_cache=draw(st.integers(0, 4)) == 0, disable_cuda_graph=not graphs,
        cuda_graph_max_bs=draw(st.sampled_from((2, 4, 12, None))) if graphs else None,
        disable_overlap_schedule=draw(st.booleans()),
        guaranteed_no_evict=draw(st.integers(0, 3)) == 0)


@st.composite
def cases(draw, model_info: ModelInfo, *, config_options: dict[str, Any] | None = None,
          **workload_options: Any) -> ConformanceCase:
    """A workload (`workloads(model_info, **workload_options)`) and an engine config sized
    for it (`engine_configs(workload, **config_options)`)."""
    workload = draw(workloads(model_info, **workload_options))
    config = draw(engine_configs(workload, **(config_options or {})))
    return ConformanceCase(config, workload, model_info)


# --- clocks, token sources, runners ----------------------------------------------------
