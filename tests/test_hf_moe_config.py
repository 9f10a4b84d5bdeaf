"""The shared config.json reader's mixture-of-experts, MLA and quantization parts
(`shared.config.moe_config`, `shared.config.mla_config`, `shared.config.quant_config`) against transformers'
own config classes."""

from __future__ import annotations

import pytest
import transformers

from shared.config.hf_config import HFConfig, InvalidModelConfig


def _read(config_class, **fields) -> HFConfig:
    return HFConfig.from_dict(config_class(**fields).to_dict())


def test_mixtral_routes_top2_of_8_softmax_renormalised_in_every_layer():
    """Mixtral: 8 experts of intermediate_size, top-2, no shared experts, all layers sparse."""
    c = _read(transformers.MixtralConfig, num_hidden_layers=4)
    m = c.moe
    assert (c.arch, m.num_experts, m.experts_per_token, m.expert_intermediate_size) == ("mixtral", 8, 2, 14336)
    assert (m.scoring, m.norm_topk_prob, m.shared_intermediate_size) == ("softmax", True, 0)
    assert m.sparse_layers == (True,) * 4 and c.mla is None


def test_qwen3_moe_dense_layers_follow_mlp_only_layers_and_sparse_step():
    """Qwen3-MoE: layer i is dense when listed in mlp_only_layers or (i+1) % step != 0."""
    c = _read(transformers.Qwen3MoeConfig, num_hidden_layers=6, decoder_sparse_step=2,
              mlp_only_layers=[3], norm_topk_prob=True)
    assert c.moe.sparse_layers == (False, True, False, False, False, True)
    assert (c.moe.expert_intermediate_size, c.moe.norm_topk_prob, c.qk_norm) == (768, True, True)


def test_deepseek_v3_has_shared_experts_grouped_sigmoid_routing_and_latent_kv():
    """DeepSeek-V3: 256 routed + 1 shared expert, sigmoid with the correction bias, 8 groups
    of which 4 eligible, 3 dense layers first; MLA caches 512 + 64 values per token."""
    c = _read(transformers.DeepseekV3Config)
    m = c.moe
    assert (m.num_experts, m.experts_per_token, m.shared_intermediate_size) == (256, 8, 2048)
    assert (m.scoring, m.score_correction_bias, m.n_group, m.topk_group) == ("sigmoid", True, 8, 4)
    assert m.routed_scaling_factor == 2.5 and m.sparse_layers[:4] == (False, False, False, True)
    assert (c.mla.cache_dim, c.mla.qk_head_dim, c.mla.v_head_dim, c.head_dim) == (576, 192, 128, 192)


def test_dense_configs_have_no_moe_mla_or_quantization():
    """A Llama config reads as dense, full per-head KV, unquantized."""
    c = _read(transformers.LlamaConfig)
    assert (c.moe, c.mla, c.quantization) == (None, None, None)


@pytest.mark.parametrize("drop", ["num_experts_per_tok", "moe_intermediate_size"])
def test_a_moe_config_missing_a_routing_field_is_refused_naming_it(drop):
    """No silent default for the fields routing needs."""
    d = transformers.Qwen3MoeConfig().to_dict()
    d.pop(drop)
    if drop == "moe_intermediate_size":
        d.pop("intermediate_size")
    with pytest.raises(InvalidModelConfig, match="intermediate_size" if drop != "num_experts_per_tok" else drop):
        HFConfig.from_dict(d)


def test_more_experts_per_token_than_experts_is_refused():
    d = transformers.MixtralConfig(num_experts_per_tok=9).to_dict()
    with pytest.raises(InvalidModelConfig, match="num_experts_per_tok"):
        HFConfig.from_dict(d)


def test_fp8_quantization_config_reads_method_bits_and_block():
    """DeepSeek-V3's quantization_config: fp8, 8 bits, 128x128 scale blocks."""
    d = transformers.LlamaConfig().to_dict()
    d["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                "weight_block_size": [128, 128]}
    q = HFConfig.from_dict(d).quantization
    assert (q.method, q.weight_bits, q.weight_block_size) == ("fp8", 8, (128, 128))


@pytest.mark.parametrize("bad", [{"quant_method": "mystery"}, {"bits": 4},
                                 {"quant_method": "fp8", "weight_block_size": [128]}])
def test_a_bad_quantization_config_is_refused(bad):
    d = transformers.LlamaConfig().to_dict()
    d["quantization_config"] = bad
    with pytest.raises(InvalidModelConfig, match="quantization_config"):
        HFConfig.from_dict(d)


def test_kv_layout_of_mla_is_the_latent_and_fp8_doubles_capacity():
    """DeepSeek-V3 caches 576 values per token and layer (not 2 x 128 heads x 192); a dense
    GQA model 2 x kv heads x head_dim; fp8 fits twice the tokens of bf16 in the same bytes."""
    from shared.config.kv_cache_layout import KVCacheLayout

    v3 = _read(transformers.DeepseekV3Config)
    assert KVCacheLayout.of(v3, 2).bytes_per_token == 61 * 576 * 2
    llama = _read(transformers.LlamaConfig, num_key_value_heads=8)
    bf16, fp8 = KVCacheLayout.of(llama, 2), KVCacheLayout.of(llama, 1)
    assert bf16.bytes_per_token == llama.num_layers * 2 * 8 * llama.head_dim * 2
    assert fp8.tokens_in(10**9) == 2 * bf16.tokens_in(10**9)
    assert KVCacheLayout.of(llama, 2, tp_size=8).bytes_per_token == bf16.bytes_per_token // 8
