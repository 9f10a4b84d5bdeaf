"""SGLang's wide expert parallelism in the kernel cost model: DeepEP's dispatch and combine
over NVLink and RDMA as DeepEP measures them, collectives that span nodes on the GPUs'
network cards, data-parallel dense layers and LM head, two-batch overlap, EPLB's redundant
experts; and the flags refused where the layout cannot carry them."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost.batch_shape import BatchShape
from sim.cost.kernel.model import KernelCostModel
from sim.cost.kernel.two_batch_overlap import exposed_alltoall
from sim.hardware.cluster_network import (
    LOW_LATENCY_A2A_FRACTION,
    NORMAL_A2A_FRACTION,
    deepep_time,
    distinct_remote_nodes,
)
from sim.hardware.lookup import get_hardware
from sim.model.ep_options import EPOptions
from sim.model.from_config import get_model_shape
from sim.run.build import build_simulation

H100 = get_hardware("h100")
NET = H100.network
WIDE = EPOptions("deepep", 1, dp_lm_head=True, redundant_experts=32)


def _model(options: EPOptions, tp: int = 32) -> KernelCostModel:
    m = options.physical_shape(get_model_shape("deepseek-v3").with_dtypes("fp8"))
    return KernelCostModel(m, H100, tp, tp, attention_dp=tp, ep_options=options)


def test_low_latency_dispatch_sends_every_pair_over_rdma_as_deepep_measures():
    """128 tokens, top-8, hidden 7168 at EP 32: 31/32 of the pairs, fp8 out and bf16 back,
    at 0.82 of 50 GB/s: ~0.53 ms, DeepEP's 182 + 350 us."""
    t = deepep_time(128, 8, 7168, 32, NET, 450e9, low_latency=True)
    expected = 128 * 8 * 31 / 32 * 3 * 7168 / (50e9 * LOW_LATENCY_A2A_FRACTION)
    assert t == pytest.approx(expected)
    assert t == pytest.approx(182e-6 + 350e-6, rel=0.05)


def test_normal_dispatch_sends_a_row_once_per_remote_node():
    """4 nodes, top-8: 3 (1 - (3/4)^8) remote nodes per token, each 3 x 7168 bytes at 0.9
    of the card, which bounds it over NVLink's forwarding."""
    nodes = distinct_remote_nodes(8, 4)
    assert nodes == pytest.approx(3 * (1 - 0.75 ** 8))
    t = deepep_time(4096, 8, 7168, 32, NET, 450e9, low_latency=False)
    assert t == pytest.approx(4096 * nodes * 3 * 7168 / (50e9 * NORMAL_A2A_FRACTION))
    assert deepep_time(4096, 8, 7168, 1, NET, 450e9, low_latency=False) == 0.0


def test_deepep_replaces_the_batch_gather_of_sparse_layers():
    """With DeepEP a sparse layer pays its own rows' all-to-all, not an all-reduce of the
    gathered batch; dense layers under moe_dense_tp_size 1 need no collective at all."""
    shape = BatchShape.decode(np.full(32 * 64, 1000), 32 * 64)
    gathered = _model(EPOptions()).step_cost(shape)
    wide = _model(WIDE).step_cost(shape)
    assert wide.allreduce == 0.0 and wide.alltoall > 0
    assert gathered.alltoall == 0.0 and gathered.allreduce > wide.alltoall


def test_a_collective_beyond_one_node_runs_at_the_network_card():
    """An all-reduce over 32 GPUs (4 nodes) is slower than over 8 for the same rows."""
    shape = BatchShape.decode(np.full(256, 1000), 256)
    m = get_model_shape("llama-3.1-70b")
    per_gpu = [KernelCostModel(m, H100, tp, attention_dp=tp).step_cost(shape).allreduce
               for tp in (8, 32)]
    assert per_gpu[1] > 4 * per_gpu[0]


def test_a_data_parallel_lm_head_drops_the_logits_gather():
    """Each rank's own rows over the whole vocabulary: far cheaper than gathering 72 ranks'
    logits over InfiniBand."""
    shape = BatchShape.decode(np.full(72 * 256, 2000), 72 * 256)
    sharded = _model(EPOptions("deepep", 1, redundant_experts=32), 72).step_cost(shape)
    assert _model(WIDE, 72).step_cost(shape).lm_head < sharded.lm_head / 10


def test_two_batch_overlap_leaves_what_the_stages_do_not_hide():
    """A decode step's all-to-all under TBO is the four-stage pipeline's excess over its
    compute (linear and attention, experts), the low-latency kernels taking no SMs."""
    shape = BatchShape.decode(np.full(32 * 128, 1000), 32 * 128)
    plain = _model(WIDE).step_cost(shape)
    model = _model(EPOptions("deepep", 1, True, True, 32))
    tbo, raw = model.step_cost(shape), model._kernels.fixed(shape.rows, shape.rows, True).alltoall
    assert raw == pytest.approx(plain.alltoall, rel=0.01)
    assert tbo.alltoall == pytest.approx(exposed_alltoall(
        tbo.linear + tbo.attention, tbo.experts, raw, 0.0))
    assert tbo.alltoall < plain.alltoall


def test_two_micro_batches_read_the_weights_twice():
    """Decode GEMMs are bound by their weight bytes: two half batches cost more than one."""
    shape = BatchShape.decode(np.full(32 * 16, 1000), 32 * 16)
    plain = _model(WIDE).step_cost(shape)
    tbo = _model(EPOptions("deepep", 1, True, True, 32)).step_cost(shape)
    assert tbo.linear > 1.5 * plain.linear and tbo.experts > 1.5 * plain.experts
    assert tbo.lm_head == plain.lm_head


def test_an_extends_overlap_pays_the_normal_kernels_sms():
    """A prefill's DeepEP normal kernels hold 20 of the H100's 132 SMs while they run."""
    shape = BatchShape.build("EXTEND", np.full(32 * 8, 1024), np.zeros(32 * 8, dtype=int))
    model = _model(EPOptions("deepep", 1, True, True, 32))
    tbo = model.step_cost(shape)
    raw = model._kernels.fixed(shape.rows, shape.padded_lm_head_rows, False,
                               model._busiest_rank(shape, False)[0]).alltoall
    assert tbo.alltoall == pytest.approx(exposed_alltoall(
        tbo.linear + tbo.attention, tbo.experts, raw, 20 / 132))
    assert tbo.alltoall > 0


def test_redundant_experts_are_placed_and_held_in_memory():
    """256 + 32 experts divide over 72 ranks (256 alone does not); their weights count."""
    m = get_model_shape("deepseek-v3")
    assert WIDE.physical_shape(m).moe.num_experts == 288
    assert WIDE.physical_shape(m).expert_weight_bytes == pytest.approx(
        m.expert_weight_bytes * 288 / 256)
    with pytest.raises(ValueError, match="does not divide"):
        build_simulation(model="deepseek-v3", hardware="h100", tp=72, ep_size=72, dp_size=72,
                         enable_dp_attention=True, cost_model="kernel")
    build_simulation(model="deepseek-v3", hardware="h100", tp=72, ep_size=72, dp_size=72,
                     enable_dp_attention=True, cost_model="kernel", ep_options=WIDE)


def test_data_parallel_dense_layers_hold_their_whole_weights():
    """moe_dense_tp_size 1 and a DP LM head: each GPU holds the dense MLPs, the shared
    experts and the head whole, 1 - 1/tp of them beyond its shard."""
    m = get_model_shape("deepseek-v3")
    moe, h = m.moe, m.hidden_size
    dense = 3 * h * ((m.num_layers - moe.num_sparse_layers) * m.intermediate_size
                     + moe.num_sparse_layers * moe.shared_intermediate_size)
    # NOTE: the checkpoint's fp8 covers the MLPs; the LM head stays bf16
    expected = (dense * 1 + m.embedding_params * 2) * (1 - 1 / 8)
    assert WIDE.replicated_weight_bytes(m, 8) == pytest.approx(expected)


@pytest.mark.parametrize("kwargs, match", [
    ({"ep_options": EPOptions("deepep")}, "need attention data parallelism"),
    ({"ep_options": EPOptions("deepep"), "dp_size": 4, "enable_dp_attention": True},
     "one GPU per attention rank"),
    ({"ep_options": EPOptions(redundant_experts=8), "model": "llama-3.1-70b", "ep_size": 1},
     "dense model"),
])
def test_wide_ep_flags_the_layout_cannot_carry_are_refused(kwargs, match):
    """Each bad combination raises ValueError naming the flag before anything runs."""
    args = {"model": "deepseek-v3", "hardware": "h100", "tp": 8, "ep_size": 8,
            "cost_model": "kernel", **kwargs}
    with pytest.raises(ValueError, match=match):
        build_simulation(**args)


@pytest.mark.parametrize("kwargs, match", [
    ({"a2a_backend": "nccl"}, "moe_a2a_backend 'nccl'"),
    ({"dense_tp_size": 2}, "moe_dense_tp_size"),
    ({"redundant_experts": -1}, "ep_num_redundant_experts"),
])
def test_bad_ep_options_are_refused_by_name(kwargs, match):
    """Unknown backends, dense tp sizes other than 1 and negative counts say which flag."""
    with pytest.raises(ValueError, match=match):
        EPOptions(**kwargs)
