"""Attention data parallelism in the simulator (SGLang's --enable-dp-attention --dp-size d):
one rank's share of the attention at tp / d, the MLP over the whole batch, the attention
weights replicated per rank and the KV of d ranks; bad layouts refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from shared import SamplingParams, Synthetic, Workload
from sim.cost.batch_shape import BatchShape
from sim.cost.kernel.attention_ranks import busiest_rank_rows
from sim.cost.kernel.forward_kernels import ForwardKernels
from sim.cost.kernel.model import KernelCostModel
from sim.cost.kernel.params import KernelParams
from sim.hardware.collectives import allreduce_time
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape
from sim.model.kv_capacity import kv_capacity_tokens
from sim.model.parallelism import kv_bytes_per_token_per_rank, weight_bytes_per_gpu
from sim.run.simulate import simulate

H200 = get_hardware("h200")


def _kernels(model: str, tp: int, dp: int = 1, ep: int = 1) -> ForwardKernels:
    return ForwardKernels(get_model_shape(model), H200, KernelParams(), tp, ep, 0.0, dp)


def _workload(n: int = 24) -> Workload:
    return Synthetic(n, 256, 16,
                     sampling_params=SamplingParams(max_new_tokens=16, ignore_eos=True)).build(
                         vocab_size=1000, rate=float("inf"))


def test_one_attention_rank_is_the_plain_engine():
    """dp_size 1 with enable_dp_attention gives the same steps as without it."""
    args = {"model": "llama-3-8b", "hardware": "h200", "cost_model": "kernel"}
    plain = simulate(_workload(), **args, keep_trace=True)
    one = simulate(_workload(), dp_size=1, enable_dp_attention=True, **args, keep_trace=True)
    assert one.steps["duration"].tolist() == plain.steps["duration"].tolist()


def test_decode_attention_runs_on_one_ranks_share_of_the_kv():
    """tp 8 over 8 attention ranks reads per rank what a tp-1 engine reads for 1/8 the KV."""
    assert _kernels("llama-3.1-70b", 8, 8).decode_attention(8 * 40_000) == \
        pytest.approx(_kernels("llama-3.1-70b", 1).decode_attention(40_000))


def test_extend_attention_runs_on_one_ranks_share_of_the_pairs():
    """Eight 1024-token prefills over 8 ranks cost one prefill at tp 1."""
    assert _kernels("llama-3.1-70b", 8, 8).extend_attention([0] * 8, [1024] * 8, 8 * 1024) \
        == pytest.approx(_kernels("llama-3.1-70b", 1).extend_attention([0], [1024], 1024))


def test_the_mlp_all_reduce_spans_the_whole_batch_and_attention_needs_none():
    """With one GPU per attention rank, only the MLP's all-reduce of all rows is left."""
    m, rows = get_model_shape("llama-3.1-70b"), 512
    bus = H200.interconnect_bw * H200.interconnect_efficiency
    expected = m.num_layers * allreduce_time(rows * m.hidden_size * 2, 8, bus).total
    assert _kernels("llama-3.1-70b", 8, 8).fixed(rows, rows, True).allreduce == \
        pytest.approx(expected)


def test_each_gpu_holds_the_attention_weights_of_its_rank():
    """Attention weights / (tp / dp), the rest / tp, the experts / ep."""
    m = get_model_shape("deepseek-v3")
    attention = m.num_layers * m.attention_params_per_layer * m.weight_bytes_per_param
    rest = m.weight_bytes - m.expert_weight_bytes - attention
    expected = attention / 2 + rest / 8 + m.expert_weight_bytes / 8
    assert weight_bytes_per_gpu(m, 8, 8, attention_dp=4) == pytest.approx(expected)


def test_the_engine_holds_the_kv_of_every_attention_rank():
    """KV tokens = dp x one rank's (free memory / KV bytes per token at the attention tp)."""
    m = get_model_shape("qwen3-235b-a22b").with_dtypes("fp8")
    free = H200.mem_capacity * 0.9 - weight_bytes_per_gpu(m, 8, 8, attention_dp=8)
    per_rank = int(free // kv_bytes_per_token_per_rank(m, 1))
    assert kv_capacity_tokens(m, H200, 8, ep_size=8, attention_dp=8) == 8 * per_rank


def test_attention_dp_serves_a_moe_model_faster_than_tp_attention_at_large_batch():
    """DeepSeek-V3's MLA latent is replicated under TP, so splitting requests over ranks
    cuts the per-GPU attention of a big decode batch."""
    shape = BatchShape.decode(np.full(1024, 2048), 1024)
    tp = KernelCostModel(get_model_shape("deepseek-v3"), H200, 8, 8)
    dp = KernelCostModel(get_model_shape("deepseek-v3"), H200, 8, 8, attention_dp=8)
    assert dp.step_cost(shape).attention < tp.step_cost(shape).attention / 4


@pytest.mark.parametrize("kwargs, match", [
    ({"dp_size": 3, "enable_dp_attention": True}, "dp_size=3 does not divide tp=8"),
    ({"dp_size": 2}, "without enable_dp_attention"),
    ({"dp_size": 0, "enable_dp_attention": True}, "dp_size must be a positive integer"),
    ({"dp_size": 8, "enable_dp_attention": True, "cost_model": "roofline"},
     "kernel cost model only"),
])
def test_bad_attention_dp_layouts_are_refused_by_name(kwargs, match):
    """Each bad layout raises ValueError naming the flag before anything runs."""
    args = {"model": "llama-3.1-70b", "hardware": "h200", "tp": 8, "cost_model": "kernel"}
    with pytest.raises(ValueError, match=match):
        simulate(_workload(2), **{**args, **kwargs}, keep_trace=True)


def test_with_the_batch_gathered_experts_need_no_all_to_all():
    """Attention DP gathers every row to every GPU before the MoE (no DeepEP): the expert
    layers pay the gather and scatter (one all-reduce of the batch each), no all-to-all."""
    m, rows = get_model_shape("qwen3-235b-a22b"), 256
    bus = H200.interconnect_bw * H200.interconnect_efficiency
    parts = _kernels("qwen3-235b-a22b", 8, 8, 8).fixed(rows, rows, True)
    assert parts.alltoall == 0.0 and parts.experts > 0
    assert parts.allreduce == pytest.approx(
        m.num_layers * allreduce_time(rows * m.hidden_size * 2, 8, bus).total)


def test_a_request_stays_on_one_attention_rank():
    """Requests are dealt whole, longest first: a lone prefill loads one rank with every token,
    a decode batch splits evenly, and mixed lengths balance as LPT does."""
    assert busiest_rank_rows([4096], 8) == 4096
    assert busiest_rank_rows([1] * 20, 8) == 3
    assert busiest_rank_rows([5, 4, 3, 3, 3], 2) == 10   # LPT: A gets 5, 3; B gets 4, 3, 3
    assert busiest_rank_rows([7, 2], 1) == 9


def test_a_lone_prefill_under_attention_dp_costs_one_rank_its_whole_attention():
    """One 4096-token prompt on 8 attention ranks is priced on the rank that holds it: slower
    than the same tokens as eight 512-token prompts, one per rank."""
    m = KernelCostModel(get_model_shape("deepseek-v3"), H200, 8, 8, attention_dp=8)
    lone = m.step_cost(BatchShape.build("EXTEND", [4096], [0]))
    spread = m.step_cost(BatchShape.build("EXTEND", [512] * 8, [0] * 8))
    assert lone.attention > spread.attention and lone.linear > spread.linear
