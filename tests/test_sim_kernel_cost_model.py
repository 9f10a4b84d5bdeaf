"""The kernel-level cost model's terms: GEMM tile and wave quantization, NCCL's alpha-beta
collectives, per-layer GEMM shapes, and CPU time with and without the overlap schedule."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost.batch_shape import BatchShape
from sim.cost.engine_profile import EngineProfile, get_engine_profile
from sim.cost.kernel.elementwise_traffic import elementwise_row_bytes
from sim.cost.kernel.gemm_time import GemmChip, gemm_efficiency, gemm_time
from sim.cost.kernel.model import KernelCostModel
from sim.cost.kernel.params import KernelParams
from sim.hardware.collectives import allgather_time, allreduce_time
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape
from sim.model.layer_gemms import forward_gemms

CHIP = GemmChip(num_sms=4, mamf=1e12, memory_rate=1e18, kernel_latency=0.0)


def test_a_grid_of_whole_waves_runs_at_the_achievable_matmul_rate():
    """256 x 512 in 128 x 128 tiles is 8 tiles: two full waves of 4 SMs, MAMF exactly."""
    assert gemm_efficiency(CHIP, 256, 512, 8192) == pytest.approx(1.0)


def test_a_partial_last_wave_loses_its_idle_sms():
    """n = 640: 10 tiles in 3 waves of 4 (the best tile); 10 of 12 slots do work."""
    assert gemm_efficiency(CHIP, 256, 640, 8192) == pytest.approx(10 / 12)


def test_tile_padding_of_a_small_m_is_lost_compute():
    """m = 100 pads to a 128-row tile: 100/128 of the compute is useful."""
    assert gemm_efficiency(CHIP, 100, 512, 8192) == pytest.approx(100 / 128)


def test_a_grid_smaller_than_the_sms_splits_k_to_fill_them():
    """One 128 x 128 tile on 4 SMs splits K four ways (4 units, one wave) instead of 1 of 4."""
    t = gemm_time(CHIP, 128, 128, 8192, 2, 2)
    assert t.compute == pytest.approx(2 * 128 * 128 * 8192 / 1e12)


def test_a_decode_gemm_is_bound_by_its_weight_bytes_plus_latency():
    """Four rows through a 4096 x 4096 bf16 weight: time = bytes / memory rate + latency."""
    chip = GemmChip(num_sms=132, mamf=800e12, memory_rate=3e12, kernel_latency=2e-6)
    t = gemm_time(chip, 4, 4096, 4096, 2, 2)
    bytes_moved = 4096 * 4096 * 2 + 4 * 4096 * 2 * 2
    assert t.memory > t.compute and t.total == pytest.approx(bytes_moved / 3e12 + 2e-6)


def test_a_small_all_reduce_costs_nccl_latency_not_bandwidth():
    """8 ranks, 16 KB: the LL ring, 3.6 us + 14 hops x 0.47 us, plus its small transfer."""
    c = allreduce_time(16e3, 8, 337.5e9)
    assert c.latency == pytest.approx((3.6 + 14 * 0.47) * 1e-6)
    assert c.transfer == pytest.approx(16e3 / (337.5e9 / 4 * 8 / 14))


def test_a_large_all_reduce_runs_at_ring_bandwidth():
    """8 ranks, 256 MB: Simple ring, 2 (n-1)/n of the bytes over the bus bandwidth."""
    c = allreduce_time(256e6, 8, 337.5e9)
    assert c.transfer == pytest.approx(256e6 * 14 / 8 / 337.5e9)
    assert c.latency == pytest.approx((8.4 + 14 * 3.4) * 1e-6)


def test_collectives_on_one_rank_cost_nothing():
    """tp = 1 has no all-reduce or all-gather."""
    assert allreduce_time(1e6, 1, 1e9).total == allgather_time(1e6, 1, 1e9).total == 0.0


def test_forward_gemms_hold_exactly_the_shared_linear_weights():
    """The GEMMs' weights on one of two ranks, summed over layers, are the shape's shared
    linear parameters / 2, the MoE router replicated; at tp 1 MLA's too (absorbed kv_b)."""
    for key in ("llama-3-8b", "mixtral-8x7b", "qwen3-30b-a3b"):
        m = get_model_shape(key)
        router = m.num_sparse_layers * (m.moe.num_experts if m.moe else 0) * m.hidden_size
        g = forward_gemms(m, 2)
        per_rank = sum(x.n * x.k * x.count for x in g.attention + g.rows)
        assert per_rank == (m.shared_linear_params - router) / 2 + router, key
    m = get_model_shape("deepseek-v3")
    g = forward_gemms(m, 1)
    assert sum(x.n * x.k * x.count for x in g.attention + g.rows + g.decode_rows) == \
        m.shared_linear_params


def _model(**params) -> KernelCostModel:
    return KernelCostModel(get_model_shape("llama-3-8b"), get_hardware("h100"), 1,
                           params=KernelParams(**params))


def test_cpu_time_is_hidden_under_overlap_and_added_without_it():
    """A decode step costs device + CPU, or max(device, CPU) under the overlap schedule."""
    engine = EngineProfile("test", cpu_per_step=1e-3, cpu_per_request=3e-6, overlap=True)
    m = KernelCostModel(get_model_shape("llama-3-8b"), get_hardware("h100"), 1, engine=engine)
    cost = m.step_cost(BatchShape.decode(np.full(8, 100), 8))
    assert cost.overhead == pytest.approx(1e-3 + 8 * 3e-6)
    assert cost.time(overlap=False) == pytest.approx(cost.device + cost.overhead)
    assert cost.time(overlap=True) == pytest.approx(max(cost.device, cost.overhead))


def test_an_eager_step_pays_the_launches_the_device_does_not_hide():
    """Above cuda_graph_max_bs each kernel is launched: launch time beyond the device's counts."""
    m = KernelCostModel(get_model_shape("llama-3-8b"), get_hardware("h100"), 1,
                        params=KernelParams(launch_per_kernel=1e-3), cuda_graph_max_bs=4)
    graph = m.step_cost(BatchShape.decode(np.full(4, 100), 4))
    eager = m.step_cost(BatchShape.decode(np.full(8, 100), 8))
    p = get_engine_profile("sglang")
    assert graph.overhead == pytest.approx(p.cpu_per_step + 4 * p.cpu_per_request)
    launches = 1e-3 * m._kernels.kernel_count
    assert eager.overhead == pytest.approx(p.cpu_per_step + 8 * p.cpu_per_request
                                           + launches - eager.device)


def test_decode_step_times_equal_step_time_of_each_step():
    """The decode-run fast path gives the floats step_time gives step by step."""
    m = _model()
    seq = np.array([10, 200, 3000])
    for overlap in (True, False):
        times = m.decode_step_times(seq, 4, overlap=overlap)
        for j in range(3):
            assert next(times) == m.step_time(BatchShape.decode(seq + j, 4), overlap=overlap)


def test_a_long_prefill_approaches_the_chips_matmul_rate():
    """8B, 4096-token prefill on H100: linear FLOPs within 10% of the MAMF rate's time,
    beside the elementwise kernels' and the KV store's bytes at the memory rate."""
    m, shape, hw = _model(kernel_latency=0.0), get_model_shape("llama-3-8b"), get_hardware("h100")
    cost = m.step_cost(BatchShape.build("EXTEND", [4096], [0], 1))
    streamed = 4096 * sum(elementwise_row_bytes(shape, 1, 1, 2)) / (hw.mem_bw * 0.8)
    ideal = 4096 * shape.linear_flops_per_token / 794.5e12
    assert ideal <= cost.linear - streamed - m._kernels.kv_write(4096) <= 1.1 * ideal


@pytest.mark.parametrize("tp, before, after", [
    (4, [(0, 128)], [(0, 129)]),
    (8, [(0, 256)], [(0, 256)] + [(0, 1)] * 16),
])
def test_prefill_attention_with_more_tokens_or_requests_never_costs_less(tp, before, after):
    """Llama-3-8B on H100: a 129th token (a second query tile of one row) or sixteen 1-token
    requests beside a 256-token prefill add work; the longest tile is no shorter."""
    m = KernelCostModel(get_model_shape("llama-3-8b"), get_hardware("h100"), tp)

    def attention(reqs):
        return m.step_cost(BatchShape.build("EXTEND", [p + e for p, e in reqs],
                                            [p for p, _ in reqs])).attention
    assert attention(after) >= attention(before)


def test_a_long_prefills_attention_runs_at_the_attention_rate_on_every_sm():
    """A 4096-token prefill at tp 1 (32 heads x 32 query tiles over 132 SMs): its causal
    pairs at the chip's FlashAttention rate, within the longest tile's share of a wave."""
    m, shape = _model(kernel_latency=0.0), get_model_shape("llama-3-8b")
    attention = m.step_cost(BatchShape.build("EXTEND", [4096], [0], 1)).attention
    ideal = 4096 * 4097 // 2 * shape.naive_attention_flops_per_pair / (989.4e12 * 0.75)
    assert ideal <= attention <= 1.02 * ideal


def test_elementwise_kernels_move_the_norm_rotary_and_gated_activation_bytes():
    """Per row, Llama-3-8B: 32 layers x (two fused add-norms 4 x 4096 each, rotary over 32
    query and 8 key heads of 128 read and written) and 32 x (gated activation 3 x 14336), in
    bf16; at tp 4 each rank's heads and MLP shard are a quarter. DeepSeek-V3 (MLA) rotates
    its 64 rope dims of 128 heads and the shared key; its 58 sparse layers run 3 x 2048 of
    shared expert, its 3 dense layers 3 x 18432."""
    llama, ds = get_model_shape("llama-3-8b"), get_model_shape("deepseek-v3")
    assert elementwise_row_bytes(llama, 1, 1, 2) == (32 * (8 * 4096 + 2 * 40 * 128) * 2,
                                                    32 * 3 * 14336 * 2)
    assert elementwise_row_bytes(llama, 4, 4, 2) == (32 * (8 * 4096 + 2 * 10 * 128) * 2,
                                                    32 * 3 * 14336 * 2 / 4)
    assert elementwise_row_bytes(ds, 8, 8, 1) == (
        61 * (8 * 7168 + 2 * (16 + 1) * 64), (3 * 3 * 18432 + 58 * 3 * 2048) / 8)


def test_a_roofline_only_chip_is_refused_up_front_naming_it(tmp_path):
    """A hardware entry without kernel constants ("kernels": null drops its base's) is
    refused when the model is built: one error naming the chip and saying it is
    roofline-only."""
    path = tmp_path / "hw.json"
    path.write_text('{"my-gpu": {"base": "h100", "kernels": null}}')
    with pytest.raises(ValueError, match=r"'my-gpu' is roofline-only.*roofline cost model"):
        KernelCostModel(get_model_shape("llama-3-8b"), get_hardware(path), 1)


def test_a_json_entry_based_on_a_chip_prices_as_that_chip(tmp_path):
    """An entry with a base inherits its kernel constants and network: a renamed H100
    prices a prefill step exactly as H100 does."""
    path = tmp_path / "hw.json"
    path.write_text('{"my-h100": {"base": "h100"}}')
    shape, m = BatchShape.build("EXTEND", [2048], [0], 1), get_model_shape("llama-3-8b")
    mine, h100 = (KernelCostModel(m, get_hardware(h), 1) for h in (path, "h100"))
    assert mine.step_cost(shape) == h100.step_cost(shape)


def test_grouped_expert_gemms_stream_weights_at_their_own_memory_efficiency():
    """Batch-1 decode on Mixtral reads two experts per layer: their (memory-bound) time goes
    as 1 / the grouped GEMM's memory efficiency, beside the permute/combine traffic."""
    shape = BatchShape.decode(np.array([512]), 1)
    m, hw = get_model_shape("mixtral-8x7b"), get_hardware("h100")
    x = [KernelCostModel(m, hw, params=KernelParams(expert_memory_efficiency=e)
                         ).step_cost(shape).experts for e in (0.8, 0.4, 0.2)]
    assert x[2] - x[1] == pytest.approx(2 * (x[1] - x[0]))


def test_grouped_expert_gemms_compute_at_their_own_share_of_the_mamf():
    """A 4096-token Mixtral prefill's experts are compute-bound: half the grouped GEMM's
    compute efficiency about doubles their time; a batch-1 decode's (memory-bound) do not
    change."""
    m, hw = get_model_shape("mixtral-8x7b"), get_hardware("h100")

    def experts(shape: BatchShape, e: float) -> float:
        params = KernelParams(expert_compute_efficiency=e)
        return KernelCostModel(m, hw, params=params).step_cost(shape).experts
    prefill = BatchShape.build("EXTEND", [4096], [0], 1)
    assert experts(prefill, 0.5) / experts(prefill, 1.0) == pytest.approx(2.0, rel=0.1)
    decode = BatchShape.decode(np.array([512]), 1)
    assert experts(decode, 0.5) == pytest.approx(experts(decode, 1.0))
    with pytest.raises(ValueError, match="expert_compute_efficiency"):
        KernelParams(expert_compute_efficiency=1.5)


def test_a_step_stores_its_new_tokens_kv_at_the_memory_rate():
    """Llama-3-8B bf16 on H100: 64 new rows x 32 layers x 2 x 8 KV heads x 128 x 2 bytes at
    0.8 of 3.35 TB/s; an fp8 cache writes half the bytes."""
    hw = get_hardware("h100")
    model = KernelCostModel(get_model_shape("llama-3-8b"), hw, 1)
    expected = 64 * 32 * 2 * 8 * 128 * 2 / (hw.mem_bw * KernelParams().memory_efficiency)
    assert model._kernels.kv_write(64) == pytest.approx(expected)
    fp8 = KernelCostModel(get_model_shape("llama-3-8b").with_dtypes("bf16", "fp8"), hw, 1)
    assert fp8._kernels.kv_write(64) == pytest.approx(expected / 2)


def test_decode_attention_pays_each_request_and_kv_heads_unit():
    """Llama-3-8B on H100 (132 SMs): 64 requests x 8 KV heads = 512 units per layer, each
    2 us of one SM, over 32 layers; the same KV spread over 4 requests pays 16 x less."""
    hw, m = get_hardware("h100"), get_model_shape("llama-3-8b")
    with_units = KernelCostModel(m, hw, 1, params=KernelParams(attention_unit_latency=2e-6))
    plain = KernelCostModel(m, hw, 1, params=KernelParams(attention_unit_latency=0.0))
    extra = [with_units.step_cost(s).attention - plain.step_cost(s).attention
             for s in (BatchShape.decode(np.full(64, 1000), 64),
                       BatchShape.decode(np.full(4, 16_000), 4))]
    assert extra[0] == pytest.approx(32 * 64 * 8 * 2e-6 / 132)
    assert extra[1] == pytest.approx(extra[0] / 16)


def test_an_mla_decode_unit_is_one_request():
    """DeepSeek-V3's latent cache is one KV head: 64 requests are 64 units per layer."""
    hw, m = get_hardware("h200"), get_model_shape("deepseek-v3").with_dtypes("fp8", "fp8")
    models = [KernelCostModel(m, hw, 8, ep_size=8, params=KernelParams(attention_unit_latency=u))
              for u in (0.0, 1e-6)]
    shape = BatchShape.decode(np.full(64, 1000), 64)
    extra = models[1].step_cost(shape).attention - models[0].step_cost(shape).attention
    assert extra == pytest.approx(61 * 64 * 1e-6 / 132)


def _dsv3_b200(weights: str, kv: str, fp8_attention: bool = False,
               fp4_moe_gather: bool = False, dp: int = 8) -> KernelCostModel:
    engine = EngineProfile("x", 0.0, 0.0, overlap=True, fp8_attention=fp8_attention,
                           fp4_moe_gather=fp4_moe_gather)
    return KernelCostModel(get_model_shape("deepseek-v3").with_dtypes(weights, kv),
                           get_hardware("b200"), 8, ep_size=8, attention_dp=dp, engine=engine,
                           params=KernelParams(attention_unit_latency=0.0, kernel_latency=0.0))


def test_fp8_attention_runs_mla_decode_at_the_fp8_rate():
    """DeepSeek-V3 on B200 under attention DP 8 (every rank all 128 heads): 1M KV tokens of
    absorbed MLA decode cost the larger of their pair FLOPs at the fp8 peak's attention
    fraction and the latent's bytes (576 x 61 layers, fp8) where the engine quantizes Q to
    fp8 over an fp8 cache; at the bf16 rate without the choice or without the fp8 cache."""
    hw, m = get_hardware("b200"), get_model_shape("deepseek-v3")
    fraction = hw.kernels.attention_fraction
    pairs = 1_000_000 / 8 * m.attention_flops_per_pair
    read = 1_000_000 / 8 * 576 * 61 / (hw.mem_bw * KernelParams().memory_efficiency)
    fp8 = _dsv3_b200("nvfp4", "fp8", fp8_attention=True)._kernels.decode_attention(1_000_000)
    assert fp8 == pytest.approx(max(pairs / (hw.flops_fp8 * fraction), read))
    bf16 = pairs / (hw.flops_bf16 * fraction)
    off = _dsv3_b200("nvfp4", "fp8")._kernels.decode_attention(1_000_000)
    assert off == pytest.approx(max(bf16, read)) and fp8 < off
    cache16 = _dsv3_b200("nvfp4", "bf16", fp8_attention=True)._kernels
    assert cache16.decode_attention(1_000_000) == pytest.approx(max(bf16, 2 * read))


def test_fp4_moe_gather_moves_the_experts_input_in_nvfp4_and_their_output_in_bf16():
    """DeepSeek-V3 nvfp4 under attention DP 8: each of the 58 sparse layers gathers 4096
    rows x 7168 as NVFP4 (0.5625 bytes a value) and reduce-scatters them in bf16 (a ring
    reduce-scatter priced as the all-gather of its result), instead of one bf16 all-reduce;
    fp8 weights, or the engine without the choice, keep the all-reduce."""
    hw = get_hardware("b200")
    bus = hw.interconnect_bw * hw.interconnect_efficiency
    values = 4096 * 7168
    swap = 58 * (allgather_time(values * 2, 8, bus).total
                 + allgather_time(values * 0.5625, 8, bus).total
                 - allreduce_time(values * 2, 8, bus).total)
    on, off = (_dsv3_b200("nvfp4", "fp8", fp4_moe_gather=g)._kernels.fixed(4096, 0, True)
               for g in (True, False))
    assert on.allreduce - off.allreduce == pytest.approx(swap)
    assert on.allreduce < off.allreduce
    fp8 = [_dsv3_b200("fp8", "fp8", fp4_moe_gather=g)._kernels.fixed(4096, 0, True).allreduce
           for g in (True, False)]
    assert fp8[0] == fp8[1]
