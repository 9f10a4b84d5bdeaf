"""exec/models/model_config.py: ModelConfig from hand-written dicts and transformers-written config.json.

The real files come from transformers' `save_pretrained` (transformers 5 writes
`rope_parameters`); the hand-written dicts cover the classic `rope_theta` + `rope_scaling`
layout and the edge cases.
"""

import json

import pytest
import transformers

from exec.models import runnable_config
from exec.models.model_config import UnsupportedModelError
from shared.config.hf_config import InvalidModelConfig

SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def config_json(tmp_path, config_class, architecture, **kw):
    """A real config.json written by transformers for `architecture`; returns its folder."""
    config = config_class(**SIZES, **kw)
    config.architectures = [architecture]
    config.save_pretrained(tmp_path)
    return tmp_path


def hand(architecture="LlamaForCausalLM", **kw):
    """A minimal hand-written config.json dict."""
    return {"architectures": [architecture], **SIZES, **kw}


@pytest.mark.parametrize(("config_class", "architecture", "arch"), [
    (transformers.LlamaConfig, "LlamaForCausalLM", "llama"),
    (transformers.Qwen2Config, "Qwen2ForCausalLM", "qwen2"),
    (transformers.Qwen3Config, "Qwen3ForCausalLM", "qwen3"),
    (transformers.MistralConfig, "MistralForCausalLM", "mistral"),
])
def test_transformers_config_json_maps_to_its_architecture(tmp_path, config_class, architecture,
                                                           arch):
    """Each supported transformers config.json parses, with its shapes, to its architecture."""
    kw = {"sliding_window": None} if arch == "mistral" else {}
    config = runnable_config(config_json(tmp_path, config_class, architecture, **kw))
    assert config.arch == arch
    assert (config.num_layers, config.num_heads, config.num_kv_heads) == (2, 4, 2)
    assert (config.vocab_size, config.hidden_size, config.intermediate_size) == (128, 64, 128)
    assert not config.tie_word_embeddings


def test_smollm2_is_a_llama_with_tied_embeddings(tmp_path):
    """SmolLM2's config.json (a Llama with tie_word_embeddings) parses as tied Llama."""
    folder = config_json(tmp_path, transformers.LlamaConfig, "LlamaForCausalLM",
                         tie_word_embeddings=True)
    config = runnable_config(folder / "config.json")
    assert (config.arch, config.tie_word_embeddings) == ("llama", True)
    assert not (config.qkv_bias or config.o_bias or config.qk_norm)


def test_unknown_architecture_is_named():
    """An architecture outside the Llama family raises naming it."""
    with pytest.raises(UnsupportedModelError, match="GPT2LMHeadModel"):
        runnable_config(hand("GPT2LMHeadModel"))


def test_missing_required_key_is_named():
    """A config.json without a required field raises naming the field."""
    d = hand()
    del d["hidden_size"]
    with pytest.raises(UnsupportedModelError, match="hidden_size"):
        runnable_config(d)


def test_missing_config_json_is_named(tmp_path):
    """from_file on a folder without config.json raises naming the path."""
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        runnable_config(tmp_path)


def test_mistral_sliding_window_shorter_than_context_is_refused(tmp_path):
    """Mistral with sliding_window < max_position_embeddings is refused, naming the window."""
    folder = config_json(tmp_path, transformers.MistralConfig, "MistralForCausalLM",
                         sliding_window=4096, max_position_embeddings=32768)
    with pytest.raises(UnsupportedModelError, match=r"sliding.window.*4096"):
        runnable_config(folder)


@pytest.mark.parametrize("window", [None, 32768])
def test_mistral_without_a_binding_window_is_allowed(window):
    """Mistral with sliding_window null (or at least the context) attends over everything."""
    d = hand("MistralForCausalLM", sliding_window=window, max_position_embeddings=32768)
    assert runnable_config(d).arch == "mistral"


def test_qwen2_sliding_window_is_refused_only_when_used():
    """Qwen2's sliding_window matters only with use_sliding_window (Qwen2.5 ships it off)."""
    d = hand("Qwen2ForCausalLM", sliding_window=4096, max_position_embeddings=32768)
    assert runnable_config({**d, "use_sliding_window": False}).arch == "qwen2"
    with pytest.raises(UnsupportedModelError, match="sliding"):
        runnable_config({**d, "use_sliding_window": True})


def test_qwen2_has_qkv_bias_but_no_o_bias(tmp_path):
    """Qwen2's q/k/v projections have biases; o_proj does not."""
    folder = config_json(tmp_path, transformers.Qwen2Config, "Qwen2ForCausalLM")
    config = runnable_config(folder)
    assert (config.qkv_bias, config.o_bias, config.qk_norm) == (True, False, False)


def test_qwen3_has_qk_norm_and_explicit_head_dim(tmp_path):
    """Qwen3 normalises q and k and takes head_dim from the config, not hidden/heads."""
    folder = config_json(tmp_path, transformers.Qwen3Config, "Qwen3ForCausalLM", head_dim=32)
    config = runnable_config(folder)
    assert (config.qk_norm, config.head_dim, config.qkv_bias) == (True, 32, False)


def test_head_dim_defaults_to_hidden_over_heads():
    """Without head_dim, it is hidden_size // num_attention_heads."""
    assert runnable_config(hand()).head_dim == 16


def test_llama_attention_bias_covers_all_four_projections():
    """Llama's attention_bias puts a bias on q/k/v and o."""
    config = runnable_config(hand(attention_bias=True))
    assert (config.qkv_bias, config.o_bias) == (True, True)


def test_both_rope_layouts_parse_to_the_same_config(tmp_path):
    """Classic rope_theta + rope_scaling and transformers 5's rope_parameters agree."""
    folder = config_json(tmp_path, transformers.LlamaConfig, "LlamaForCausalLM",
                         rope_parameters={"rope_theta": 500000.0, **LLAMA3_SCALING},
                         max_position_embeddings=131072)
    new = json.loads((folder / "config.json").read_text())
    assert "rope_parameters" in new
    classic = {k: v for k, v in new.items() if k != "rope_parameters"}
    classic.update(rope_theta=500000.0, rope_scaling=dict(LLAMA3_SCALING))
    config = runnable_config(new)
    assert config == runnable_config(classic)
    assert (config.rope_theta, config.rope_scaling) == (500000.0, LLAMA3_SCALING)


@pytest.mark.parametrize("layout", ["classic", "rope_parameters"])
def test_default_rope_has_no_scaling(layout):
    """rope_type "default" (or no scaling at all) means plain rope at rope_theta."""
    rope = ({"rope_theta": 1e6, "rope_scaling": None} if layout == "classic"
            else {"rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}})
    config = runnable_config(hand(**rope))
    assert (config.rope_theta, config.rope_scaling) == (1e6, None)


@pytest.mark.parametrize("rope", [
    {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
    {"rope_scaling": {"type": "linear", "factor": 2.0}},
    {"rope_parameters": {"rope_theta": 1e6, "rope_type": "yarn", "factor": 4.0}},
])
def test_unsupported_rope_type_is_named(rope):
    """A rope scaling other than default/llama3 raises naming its type."""
    kind = (rope.get("rope_scaling") or rope.get("rope_parameters"))
    with pytest.raises(UnsupportedModelError, match=kind.get("rope_type", kind.get("type"))):
        runnable_config(hand(**rope))


@pytest.mark.parametrize(("eos", "expected"), [
    (2, (2,)), ([128001, 128009], (128001, 128009)), (None, ())])
def test_eos_token_id_is_int_or_list(eos, expected):
    """eos_token_id, an int, a list or absent, becomes a tuple of ids."""
    assert runnable_config(hand(eos_token_id=eos)).eos_token_ids == expected


@pytest.mark.parametrize("kw,match", [
    ({"num_attention_heads": 4, "num_key_value_heads": 3}, "multiple"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"eos_token_id": ["2", 3.0]}, "eos_token_id"),
    ({"rope_scaling": {"rope_type": "llama3"}}, "missing factor"),
])
def test_inconsistent_configs_are_refused_with_the_reason(kw, match):
    """Head counts, activation, EOS ids and llama3 rope parameters are checked on load."""
    with pytest.raises(UnsupportedModelError, match=match):
        runnable_config(hand(**kw))


@pytest.mark.parametrize(("kw", "match"), [
    ({"num_attention_heads": 0}, "num_attention_heads must be a positive integer, got 0"),
    ({"vocab_size": -5}, "vocab_size must be a positive integer, got -5"),
    ({"hidden_size": 64.5}, "hidden_size must be a positive integer"),
    ({"num_hidden_layers": True}, "num_hidden_layers must be a positive integer"),
    ({"intermediate_size": "128"}, "intermediate_size must be a positive integer"),
    ({"num_key_value_heads": 0}, "num_key_value_heads must be a positive integer"),
    ({"head_dim": 0}, "head_dim must be a positive integer"),
    ({"max_position_embeddings": 0}, "max_position_embeddings must be a positive integer"),
    ({"hidden_size": 66}, r"hidden_size \(66\) is not a multiple of num_attention_heads \(4\)"),
])
def test_config_json_sizes_are_validated_naming_the_file_and_field(tmp_path, kw, match):
    """Sizes must be positive integers and heads must divide hidden_size (without head_dim);
    the error names config.json's path and the field."""
    (tmp_path / "config.json").write_text(json.dumps(hand(**kw)))
    with pytest.raises(UnsupportedModelError, match=match) as caught:
        runnable_config(tmp_path)
    assert str(tmp_path / "config.json") in str(caught.value)


def test_an_explicit_head_dim_lifts_the_divisibility_rule():
    """With head_dim given, hidden_size need not be heads * head_dim (Qwen3 style)."""
    assert runnable_config(hand(hidden_size=66, head_dim=16)).head_dim == 16


def test_malformed_config_json_is_named(tmp_path):
    """A config.json that is not a JSON object raises naming the file."""
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(InvalidModelConfig, match=r"config\.json: not valid JSON"):
        runnable_config(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(InvalidModelConfig, match="must hold a JSON object"):
        runnable_config(tmp_path)


def test_mistral_attention_bias_is_ignored_as_in_transformers():
    """MistralAttention never has biases, whatever attention_bias says."""
    c = runnable_config(hand("MistralForCausalLM", attention_bias=True, sliding_window=None))
    assert not c.qkv_bias and not c.o_bias


def test_config_without_architectures_falls_back_to_model_type():
    """A config.json written by a Config (no `architectures`) is read by its model_type."""
    d = hand()
    del d["architectures"]
    assert runnable_config({**d, "model_type": "qwen2"}).arch == "qwen2"


@pytest.mark.parametrize("config", [
    hand("MistralForCausalLM", attention_bias=True, sliding_window=4096),
    {k: v for k, v in hand("Qwen3ForCausalLM").items()},           # no model_type: head_dim 128
    hand("Qwen2ForCausalLM", model_type="qwen2", sliding_window=16, use_sliding_window=False),
    hand("LlamaForCausalLM", attention_bias=True, num_key_value_heads=2),
    {**SIZES, "model_type": "qwen3"},                                 # no architectures
])
def test_exec_and_sim_read_one_config_json_the_same_way(config):
    """The shared reader (shared.config.hf_config) gives both executors the same heads, head_dim,
    biases and q/k norms: Mistral's attention_bias ignored as transformers does, the
    architecture from `architectures` before `model_type`, an unused window ignored."""
    from sim.model.from_config import shape_from_config

    exec_view, sim_view = runnable_config(config), shape_from_config(config)
    assert (sim_view.num_heads, sim_view.num_kv_heads, sim_view.head_dim, sim_view.qkv_bias,
            sim_view.qk_norm, sim_view.max_position_embeddings) == (
        exec_view.num_heads, exec_view.num_kv_heads, exec_view.head_dim, exec_view.qkv_bias,
        exec_view.qk_norm, exec_view.max_position_embeddings)


def test_sim_prices_what_exec_refuses_and_says_what_it_assumed():
    """A binding sliding window: exec refuses it, sim prices full attention (module note)."""
    from sim.model.from_config import shape_from_config

    config = hand("MistralForCausalLM", sliding_window=16)
    with pytest.raises(UnsupportedModelError, match="sliding-window"):
        runnable_config(config)
    assert shape_from_config(config).head_dim == SIZES["hidden_size"] // SIZES["num_attention_heads"]
