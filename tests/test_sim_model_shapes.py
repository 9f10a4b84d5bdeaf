"""Model shapes (sim/model/from_config.py): config.json -> parameter counts, FLOPs and bytes."""

import json

import pytest

from experiments.main import main
from sim.model.from_config import (
    EMBEDDED_CONFIGS,
    causal_pairs,
    embedded_configs,
    get_model_shape,
)

ISSUE_KEYS = ("llama-3-8b", "llama-3-70b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b", "smollm2-135m",
              "llama-3.1-405b", "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3",
              "gpt-oss-120b", "llama-3.1-8b", "llama-3.1-70b", "llama-2-7b", "llama-2-13b",
              "llama-2-70b", "mixtral-8x22b", "llama-4-maverick", "gpt-oss-20b", "qwen3-32b")
# Published parameter counts (model cards) and the tolerance each is checked at.
PUBLISHED_PARAMS = [
    ("smollm2-135m", 135e6, 0.03),
    ("llama-3-8b", 8.03e9, 0.01),
    ("llama-3-70b", 70.6e9, 0.01),
    ("qwen2.5-7b", 7.61e9, 0.01),
    ("qwen2.5-72b", 72.7e9, 0.01),
    ("qwen3-8b", 8.19e9, 0.01),
    ("llama-3.1-405b", 405.9e9, 0.01),
    ("mixtral-8x7b", 46.7e9, 0.01),
    ("qwen3-30b-a3b", 30.5e9, 0.01),
    ("qwen3-235b-a22b", 235e9, 0.01),
    ("deepseek-v3", 671e9, 0.01),
    ("gpt-oss-120b", 116.8e9, 0.01),
    ("gpt-oss-20b", 20.9e9, 0.01),      # model card: 21B parameters (20.9B in its safetensors)
    ("qwen3-32b", 32.8e9, 0.01),        # model card: 32.8B
    ("llama-3.1-8b", 8.03e9, 0.01),
    ("llama-3.1-70b", 70.6e9, 0.01),
    ("llama-2-7b", 6.74e9, 0.01),
    ("llama-2-13b", 13.0e9, 0.01),
    ("llama-2-70b", 69.0e9, 0.01),
    ("mixtral-8x22b", 141e9, 0.01),
    ("llama-4-maverick", 400e9, 0.02),
]
# Published active parameters per token (model cards; gpt-oss's 5.1B excludes the embedding).
PUBLISHED_ACTIVE = [
    ("mixtral-8x7b", 12.9e9, 0.01),
    ("qwen3-30b-a3b", 3.3e9, 0.02),
    ("qwen3-235b-a22b", 22e9, 0.02),
    ("deepseek-v3", 37e9, 0.02),
    ("mixtral-8x22b", 39e9, 0.01),
    ("llama-4-maverick", 17e9, 0.02),
]
MOE_CONFIGS = {
    "mixtral": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
                "num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen2_moe": {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
                  "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
                  "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 151936,
                  "num_experts": 64, "moe_intermediate_size": 2560},
    "deepseek_v3": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                    "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
                    "intermediate_size": 18432, "vocab_size": 129280, "n_routed_experts": 256,
                    "kv_lora_rank": 512},
}


def test_embedded_configs_hold_the_issue_keys_with_every_field():
    """Each embedded config types the published sizes, tie_word_embeddings and context (a
    multimodal one in its text_config, tie_word_embeddings at the top as published)."""
    assert sorted(EMBEDDED_CONFIGS) == sorted(ISSUE_KEYS)
    needed = {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "intermediate_size", "vocab_size", "tie_word_embeddings", "max_position_embeddings"}
    assert all(needed <= set(c) | set(c.get("text_config", {}))
               for c in embedded_configs().values())


@pytest.mark.parametrize(("key", "params", "rel"), PUBLISHED_PARAMS)
def test_parameter_count_matches_the_published_size(key, params, rel):
    """The shape's parameter count is within tolerance of the model card's."""
    assert get_model_shape(key).param_count == pytest.approx(params, rel=rel)


def test_llama3_8b_kv_bytes_per_token():
    """Llama-3-8B bf16 KV per token = 2 * 32 layers * 8 kv heads * 128 * 2 bytes = 131072."""
    assert get_model_shape("llama-3-8b").kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072


def test_fp8_weights_halve_weight_bytes():
    """fp8 weights halve the linear layers' bytes (embeddings, LM head and norms stay
    bf16); fp32 doubles every weight byte."""
    bf16 = get_model_shape("llama-3-8b")
    fp8 = get_model_shape("llama-3-8b", weight_dtype="fp8")
    fp32 = get_model_shape("llama-3-8b", weight_dtype="float32")
    assert fp8.linear_weight_bytes * 2 == bf16.linear_weight_bytes
    assert fp8.lm_head_weight_bytes == bf16.lm_head_weight_bytes
    assert bf16.weight_bytes == fp32.weight_bytes // 2 == 2 * bf16.param_count
    plain = 2 * (bf16.extra_params_per_layer * 32 + bf16.hidden_size + 2 * bf16.embedding_params)
    assert fp8.weight_bytes == bf16.linear_weight_bytes / 2 + plain


def test_fp8_kv_halves_kv_bytes_and_leaves_weights():
    """kv_dtype fp8 halves KV bytes per token and does not change weight bytes."""
    bf16, fp8 = get_model_shape("qwen3-8b"), get_model_shape("qwen3-8b", kv_dtype="fp8")
    assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
    assert fp8.weight_bytes == bf16.weight_bytes


def test_dtype_aliases_are_accepted():
    """torch-style names map to the canonical ones."""
    shape = get_model_shape("smollm2-135m", weight_dtype="torch.bfloat16", kv_dtype="float8_e4m3fn")
    assert (shape.weight_dtype, shape.kv_dtype) == ("bf16", "fp8")


@pytest.mark.parametrize("kw", [{"weight_dtype": "int3"}, {"kv_dtype": "fp6"}, {"kv_dtype": "int4"},
                                {"weight_dtype": ""}])
def test_unknown_dtype_names_raise(kw):
    """An unknown dtype raises ValueError listing the known ones."""
    with pytest.raises(ValueError, match=r"unknown dtype .*bf16"):
        get_model_shape("llama-3-8b", **kw)


@pytest.mark.parametrize(("key", "active", "rel"), PUBLISHED_ACTIVE)
def test_active_parameter_count_matches_the_published_size(key, active, rel):
    """A MoE shape's active parameters (top-k routed experts per layer) match the model card."""
    assert get_model_shape(key).active_param_count == pytest.approx(active, rel=rel)


def test_a_complete_mixtral_config_is_priced():
    """A Mixtral config.json dict reads into a MoE shape with 8 experts, 2 per token."""
    shape = get_model_shape(MOE_CONFIGS["mixtral"])
    assert (shape.moe.num_experts, shape.moe.experts_per_token) == (8, 2)


@pytest.mark.parametrize(("name", "field"), [("qwen2_moe", "num_experts_per_tok"),
                                             ("deepseek_v3", "qk_nope_head_dim")])
def test_moe_config_missing_a_routing_field_names_it(name, field):
    """A MoE or MLA config missing a field its family needs raises ValueError naming it."""
    with pytest.raises(ValueError, match=field):
        get_model_shape(MOE_CONFIGS[name])


def test_reading_a_config_json_path_works(tmp_path):
    """A config.json file, or the folder holding it, gives the same shape as the embedded key."""
    config = dict(embedded_configs()["llama-3-8b"])
    (tmp_path / "config.json").write_text(json.dumps(config))
    from_file = get_model_shape(tmp_path / "config.json")
    from_dir = get_model_shape(str(tmp_path))
    embedded = get_model_shape("llama-3-8b")
    assert from_file.param_count == from_dir.param_count == embedded.param_count
    assert from_file.kv_bytes_per_token == embedded.kv_bytes_per_token


def test_unknown_model_key_lists_the_known_keys():
    """A key that is neither embedded nor a path raises ValueError listing the keys."""
    with pytest.raises(ValueError, match="unknown model") as err:
        get_model_shape("llama-9-9b")
    assert all(k in str(err.value) for k in ISSUE_KEYS)


def test_config_missing_a_required_key_names_it():
    """A config without intermediate_size raises ValueError naming it."""
    config = dict(embedded_configs()["smollm2-135m"])
    del config["intermediate_size"]
    with pytest.raises(ValueError, match="'intermediate_size'"):
        get_model_shape(config)


def test_malformed_config_json_raises_value_error(tmp_path):
    """A config.json that is not JSON raises ValueError naming the file."""
    path = tmp_path / "config.json"
    path.write_text("{oops")
    with pytest.raises(ValueError, match="not valid JSON"):
        get_model_shape(path)


def test_qwen3_head_dim_defaults_to_128_and_qwen2_has_qkv_bias():
    """Qwen3 without head_dim uses 128 (not hidden/heads); Qwen2 counts q/k/v biases."""
    config = dict(embedded_configs()["qwen3-8b"], hidden_size=2048)
    del config["head_dim"]
    assert get_model_shape(config).head_dim == 128
    qwen2 = get_model_shape("qwen2.5-7b")
    assert qwen2.qkv_bias and qwen2.params_per_layer - qwen2.linear_params_per_layer == (
        qwen2.q_dim + 2 * qwen2.kv_dim + 2 * qwen2.hidden_size)


def test_attention_pairs_are_causal():
    """A fresh prompt of n scores n(n+1)/2 pairs, a decode row seq_len pairs; requests add."""
    assert causal_pairs([0], [100]) == 100 * 101 // 2
    assert causal_pairs([99], [1]) == 100
    assert causal_pairs([0, 99, 10], [100, 1, 5]) == 5050 + 100 + (5 * 10 + 15)


def test_attention_flops_are_four_per_pair_per_head_dim():
    """Attention FLOPs = 4 * layers * heads * head_dim per query-key pair."""
    s = get_model_shape("llama-3-8b")
    assert s.attention_flops([0], [10]) == 4 * 32 * 32 * 128 * 55


def test_linear_flops_are_twice_the_linear_parameters():
    """Per token, the decoder linears cost 2 FLOPs per weight; the LM head 2 * hidden * vocab."""
    s = get_model_shape("llama-3-8b")
    assert s.linear_flops_per_token == 2 * 32 * s.linear_params_per_layer
    assert s.lm_head_flops_per_row == 2 * 4096 * 128256
    tied = get_model_shape("smollm2-135m")
    assert tied.lm_head_weight_bytes == 2 * 49152 * 576


def test_llama4_maverick_alternates_dense_and_moe_layers_with_their_own_widths():
    """Maverick's text_config reads as 24 dense layers (MLP 16384) and 24 MoE layers (odd
    layers: 128 routed experts of 8192, top-1, plus one shared expert of 8192)."""
    m = get_model_shape("llama-4-maverick")
    assert (m.num_layers, m.num_sparse_layers, m.intermediate_size) == (48, 24, 16384)
    assert m.moe.sparse_layers == (False, True) * 24
    assert (m.moe.num_experts, m.moe.experts_per_token) == (128, 1)
    assert m.moe.expert_intermediate_size == m.moe.shared_intermediate_size == 8192
    assert (m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim) == (5120, 40, 8, 128)
    assert (m.vocab_size, m.max_position_embeddings, m.tie_word_embeddings) == (
        202048, 1048576, False)


def test_llama4_parameter_counts_are_400b_total_and_17b_active():
    """Maverick is ~400B parameters with ~17B active per token (model card), within 2%."""
    m = get_model_shape("llama-4-maverick")
    assert m.param_count == pytest.approx(400e9, rel=0.02)
    assert m.active_param_count == pytest.approx(17e9, rel=0.02)


def test_a_flat_llama4_text_config_with_moe_layers_reads_the_listed_layers():
    """A llama4_text config listing moe_layers (Scout: every layer) makes exactly those sparse."""
    text = dict(embedded_configs()["llama-4-maverick"]["text_config"], tie_word_embeddings=False,
                num_local_experts=16, moe_layers=list(range(48)))
    m = get_model_shape(text)
    assert m.num_sparse_layers == 48 and m.moe.num_experts == 16
    assert get_model_shape(dict(text, moe_layers=[5, 7])).moe.sparse_layers == tuple(
        i in (5, 7) for i in range(48))


def test_llama4_chunked_attention_is_priced_as_full_attention():
    """Chunked layers score and store every pair like global ones (exact below 8192 tokens)."""
    m = get_model_shape("llama-4-maverick")
    assert m.attention_flops_per_pair == 4 * 48 * 40 * 128
    assert m.kv_bytes_per_token == 2 * 48 * 8 * 128 * 2
    assert m.attention_flops([0], [10000]) == 4 * 48 * 40 * 128 * 10000 * 10001 // 2


def test_llama4_maverick_simulates_on_8x_h200_with_ep_and_fp8(capsys):
    """`batchtwin simulate --model llama-4-maverick --hardware h200 --tp 8 --ep-size 8
    --quantization fp8` runs every request."""
    assert main(["simulate", "--model", "llama-4-maverick", "--hardware", "h200", "--tp", "8",
                 "--ep-size", "8", "--quantization", "fp8", "--num-requests", "200",
                 "--rate", "10", "--no-progress"]) == 0
    assert "completed 200" in capsys.readouterr().out
