"""The roofline's latency terms (sim/cost/roofline/latency.py), each against a hand-computed value:
kernel latency on its linear layers and attention, NCCL's alpha-beta all-reduce (its
agreement with the kernel model: tests/test_sim_cost_model_agreement.py)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost.batch_shape import BatchShape
from sim.cost.kernel.gemm_time import gemm_rows
from sim.cost.roofline.latency import AllReduces
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.collectives import allreduce_time
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape

H100 = get_hardware("h100")
LINK = H100.interconnect_bw * H100.interconnect_efficiency   # 337.5 GB/s NCCL bus bandwidth
MEMORY = H100.mem_bw * H100.memory_efficiency


def _decode(seq_lens: list[int]) -> BatchShape:
    return BatchShape.decode(np.asarray(seq_lens, dtype=np.int64), len(seq_lens))


def test_linear_adds_a_kernel_latency_per_gemm_and_elementwise_kernel():
    """Llama-3-8B, one request on one H100 (memory-bound): its 32 layers run 4 GEMMs (qkv,
    o, gate_up, down) and 4 elementwise kernels each, 256 kernels of 6 us beyond the weights'
    read at 80% of 3.35 TB/s."""
    model = get_model_shape("llama-3-8b")
    got = RooflineCostModel(model, H100).linear_time(_decode([1024]))
    assert got == pytest.approx(model.linear_weight_bytes / MEMORY + 256 * 6e-6)


def test_decode_attention_adds_a_kernel_latency_per_layer():
    """Llama-3-8B, one request of 1024 tokens: 1024 x (32 layers x 8 KV heads x 128 x K and V
    x 2 bytes) read at 80% of 3.35 TB/s, plus one 6 us attention kernel per layer."""
    got = RooflineCostModel(get_model_shape("llama-3-8b"), H100).attention_time(_decode([1024]))
    assert got == pytest.approx(1024 * 32 * 8 * 128 * 2 * 2 / MEMORY + 32 * 6e-6)


def test_a_one_row_allreduce_pays_nccls_ll_ring_latency():
    """Llama-3-70B at tp 8, one decode row: 160 all-reduces of 8192 bf16 values (16 KiB),
    each NCCL's LL ring: 3.6 us + 14 hops x 0.47 us, plus the bytes at a quarter of the ring's
    bandwidth (337.5 GB/s x 8 / 14)."""
    model = RooflineCostModel(get_model_shape("llama-3-70b"), H100, 8)
    got = model.allreduce_time(_decode([100]))
    assert got == pytest.approx(160 * ((3.6 + 14 * 0.47) * 1e-6 + 16384 / (LINK / 4 * 8 / 14)))


def test_a_large_allreduce_tends_to_the_ring_formula_plus_nccls_simple_latency():
    """100,000 prefill rows of Llama-3-70B at tp 8 (1.6 GB a layer): NCCL's Simple ring,
    8.4 us + 14 hops x 3.4 us, plus 2 (tp - 1) / tp of the bytes over the link."""
    model = RooflineCostModel(get_model_shape("llama-3-70b"), H100, 8)
    got = model.allreduce_time(BatchShape.build("EXTEND", [100_000], [0]))
    nbytes = 100_000 * 8192 * 2
    assert got == pytest.approx(160 * ((8.4 + 14 * 3.4) * 1e-6 + 2 * 7 / 8 * nbytes / LINK))


def test_the_roofline_allreduce_is_the_kernel_models_nccl_model():
    """One source of truth: each of the roofline's all-reduces is `sim.hardware.collectives`'."""
    model = RooflineCostModel(get_model_shape("llama-3-70b"), H100, 8)
    for rows in (1, 64, 4096):
        one = allreduce_time(rows * 8192 * 2, 8, LINK).total
        assert model.allreduce_time(_decode([10] * rows)) == pytest.approx(160 * one)


def test_allreduces_over_arrays_are_each_steps_own_floats():
    """`AllReduces.seconds_over` (decode_step_bounds, extend_step_bounds) gives `seconds`'
    floats, step by step, across the protocols' crossovers and for a step of no rows."""
    reduces = AllReduces(160, 8192 * 2, 8, LINK)
    rows = np.array([0, 1, 7, 64, 300, 2048, 9000, 100_000], dtype=np.int64)
    assert reduces.seconds_over(rows).tolist() == [reduces.seconds(int(r)) for r in rows]
    assert AllReduces(160, 8192 * 2, 1, LINK).seconds_over(rows).tolist() == [0.0] * len(rows)


def test_tp_1_has_no_allreduce_latency():
    model = RooflineCostModel(get_model_shape("llama-3-70b"), H100, 1)
    assert model.step_cost(_decode([100] * 8)).allreduce == 0.0


def test_gemm_rows_are_whole_64_row_tiles():
    """1..64 rows compute 64, 65..128 compute 128, 129 computes 192; arrays elementwise."""
    rows = [1, 64, 65, 128, 129, 192, 193]
    want = [64, 64, 128, 128, 192, 192, 256]
    assert [gemm_rows(m) for m in rows] == want
    assert gemm_rows(np.array(rows)).tolist() == want


def test_the_roofline_computes_a_decodes_linear_flops_on_whole_tiles():
    """Llama-3-8B on one H100: the linear layers' compute of 129 rows is that of 192 (the
    kernel model's smallest tiles, without its waves), 1.5x that of 128; its weights' read
    does not change."""
    model = RooflineCostModel(get_model_shape("llama-3-8b"), H100)
    compute = {m: model._linear_terms(_decode([1024] * m)) for m in (128, 129, 192)}
    assert compute[129] == compute[192]
    assert compute[129][0] == pytest.approx(1.5 * compute[128][0])
    assert compute[129][1] == compute[128][1]
