"""DeepSeek-V3 in exec (issue 20 §2): multi-head latent attention over a paged latent cache,
YaRN rope, grouped sigmoid routing with shared experts, against Hugging Face transformers on
the same weights; batching invisible to it, and a config missing its routing refused."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import transformers

from exec.engine.engine import Engine
from exec.memory.kv_pool import LatentKVPool
from exec.models.deepseek_v3 import DeepseekMoE
from exec.models.model_config import UnsupportedModelError
from experiments.dev.tiny_models import DEEPSEEK_V3
from tests.test_exec_moe import (
    BATCHED,
    GREEDY,
    PROMPTS,
    SYSTEM,
    SampledLogits,
    check_batched_parity,
)
from tests.tiny_models import COMMON, hf_logits

ARCH = "deepseek_v3"


@pytest.fixture(scope="module")
def batched_run(tiny_checkpoint):
    """(engine, outputs, logits by rid) of PROMPTS served together after a request that caches
    SYSTEM."""
    engine = Engine(tiny_checkpoint(ARCH)[0], **BATCHED)
    engine.generate(SYSTEM, GREEDY)
    recorder = SampledLogits(engine)
    outs = engine.generate(PROMPTS, GREEDY)
    return engine, outs, recorder.by_rid()


def test_mla_logits_and_greedy_tokens_match_transformers(tiny_checkpoint, batched_run):
    """A packed, prefix-cached, chunked, mixed batch: HF's greedy tokens, fp32 logits within
    1e-4 of HF's in float64."""
    engine, outs, logits = batched_run
    check_batched_parity(ARCH, engine, outs, logits,
                         copy.deepcopy(tiny_checkpoint(ARCH)[1]).double())


def test_mla_batches_give_each_request_its_tokens_alone(tiny_checkpoint, batched_run):
    """The batched run's greedy tokens are each request's tokens served alone, uncached; the
    batched engine is idle (no leaked slot or page) after."""
    engine, outs, _ = batched_run
    alone = Engine(tiny_checkpoint(ARCH)[0], max_total_tokens=256, disable_radix_cache=True,
                   chunked_prefill_size=None)
    assert [o.token_ids for o in outs] == [alone.generate(p, GREEDY).token_ids for p in PROMPTS]
    engine.scheduler.mem.check_idle()


def test_mla_kv_pool_holds_the_latent_not_per_head_kv(batched_run):
    """The paged cache is one [layers, slots, kv_lora_rank + qk_rope_head_dim] tensor."""
    engine, _, _ = batched_run
    pool, config = engine.runner.kv_pool, engine.runner.model.config
    assert isinstance(pool, LatentKVPool)
    (latent,) = pool.storage
    assert latent.shape[0] == config.num_layers
    assert latent.shape[-1] == config.mla.kv_lora_rank + config.mla.qk_rope_head_dim
    assert latent.abs().sum() > 0   # written


def test_deepseek_layers_are_dense_before_first_k_dense_replace(batched_run):
    """Layer 0 is a dense MLP (first_k_dense_replace 1); the rest route with shared experts."""
    engine, _, _ = batched_run
    layers = engine.runner.model.model.layers
    assert [isinstance(layer.mlp, DeepseekMoE) for layer in layers] == [False, True, True]
    assert all(hasattr(layer.mlp, "shared_experts") for layer in layers[1:])


@pytest.mark.parametrize("key", ["n_group", "topk_group", "first_k_dense_replace", "kv_lora_rank"])
def test_a_deepseek_config_missing_a_routing_field_is_refused_naming_it(tiny_checkpoint,
                                                                        tmp_path, key):
    """One UnsupportedModelError naming the field and the file, from config.json alone."""
    d = json.loads((tiny_checkpoint(ARCH)[0] / "config.json").read_text())
    del d[key]
    (tmp_path / "config.json").write_text(json.dumps(d))   # no weights: nothing to load
    with pytest.raises(UnsupportedModelError, match=key) as caught:
        Engine(tmp_path, max_total_tokens=64)
    assert str(tmp_path / "config.json") in str(caught.value)


def test_mla_without_a_query_low_rank_matches_transformers(tmp_path):
    """q_lora_rank None (a plain q_proj, as DeepSeek-V2-Lite): HF's greedy tokens, served
    chunked and paged."""
    torch.manual_seed(1)
    config = transformers.DeepseekV3Config(**{**COMMON, **DEEPSEEK_V3, "q_lora_rank": None})
    hf = transformers.DeepseekV3ForCausalLM(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.mul_(2.0)
    hf.save_pretrained(tmp_path)
    hf.set_experts_implementation("eager")   # NOTE: grouped_mm refuses float64
    engine = Engine(tmp_path, max_total_tokens=256, page_size=4, chunked_prefill_size=6)
    prompt = PROMPTS[3]
    out = engine.generate(prompt, GREEDY)
    ref = hf_logits(hf.double(), prompt + out.token_ids)[len(prompt) - 1 : -1]
    assert not hasattr(engine.runner.model.model.layers[0].self_attn, "q_a_proj")
    assert out.token_ids == ref.argmax(-1).tolist()
