"""Per-module weight formats (sim/model/weight_formats.py): which weight groups a quantized
checkpoint leaves in bf16, read from its modules_to_not_convert, and how the cost models
price each group at its own bytes and peak."""

import dataclasses

import numpy as np
import pytest

from sim.cost.batch_shape import BatchShape
from sim.cost.kernel.model import KernelCostModel
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.lookup import get_hardware
from sim.model.from_config import config_dict, get_model_shape
from sim.model.layer_gemms import forward_gemms
from sim.model.weight_formats import (
    MODULE_GROUPS,
    UNQUANTIZED_BY_DEFAULT,
    gemm_group,
    unquantized_groups,
)

H100 = get_hardware("h100")


@pytest.mark.parametrize("names, groups", [
    ((), UNQUANTIZED_BY_DEFAULT),
    (("model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"),
     ("attention", "router", "embedding", "lm_head")),
    (("re:.*self_attn.*", "re:.*mlp.gate$"), ("attention", "router", "embedding", "lm_head")),
    (("model.layers.*.mlp",), ("router", "mlp", "experts", "embedding", "lm_head")),
    (("model.layers.3.mlp.shared_experts",), ("router", "mlp", "embedding", "lm_head")),
    (("model.layers.0.mlp.gate_proj",), ("router", "mlp", "embedding", "lm_head")),
    (("model.layers.*.mlp.experts",), ("router", "experts", "embedding", "lm_head")),
    (("vision_tower",), UNQUANTIZED_BY_DEFAULT),
])
def test_modules_to_not_convert_name_the_groups_left_in_bf16(names, groups):
    assert unquantized_groups(names) == groups


def test_every_gemm_of_every_model_falls_in_a_weight_group():
    """Attention projections (MLA's included) are attention, the router its own group, the
    dense MLPs and shared experts mlp."""
    for key in ("llama-3-8b", "deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b"):
        g = forward_gemms(get_model_shape(key), 1)
        assert {gemm_group(x.name) for x in g.attention + g.decode_rows + g.extend_kv} <= {"attention"}
        assert {gemm_group(x.name) for x in g.rows} <= {"router", "mlp"}
        assert {gemm_group(x.name) for x in g.rows} <= set(MODULE_GROUPS)


def test_an_unknown_weight_group_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown weight group.*'vision'"):
        dataclasses.replace(get_model_shape("llama-3-8b"), unquantized=("vision",))


def test_a_bf16_model_is_priced_the_same_whatever_it_leaves_unquantized():
    """Groups kept in bf16 change nothing when every weight is bf16: identical step times."""
    m = get_model_shape("qwen3-30b-a3b")
    none = dataclasses.replace(m, unquantized=())
    for shape in (BatchShape.decode(np.array([300, 900]), 2), BatchShape.build("EXTEND", [700], [0], 1)):
        for cls in (RooflineCostModel, KernelCostModel):
            assert cls(m, H100).step_time(shape) == cls(none, H100).step_time(shape)


@pytest.mark.parametrize("cls", [RooflineCostModel, KernelCostModel])
def test_a_quantized_attention_makes_a_gpt_oss_decode_faster(cls):
    """gpt-oss with its attention in mxfp4 (everything converted) reads fewer bytes per decode
    step than its checkpoint (attention, router, embeddings, head in bf16): both cost models
    price the groups apart."""
    real = get_model_shape("gpt-oss-120b")
    all_mxfp4 = get_model_shape({**config_dict("gpt-oss-120b"),
                                 "quantization_config": {"quant_method": "mxfp4"}})
    step = BatchShape.decode(np.array([1000] * 8), 8)
    assert cls(all_mxfp4, H100).step_time(step) < cls(real, H100).step_time(step)
