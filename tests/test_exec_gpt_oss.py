"""gpt-oss in exec (issue 45): sliding-window and full layers, attention sinks, biased
experts with the clamped SwiGLU, against Hugging Face transformers on the same weights; the
window crosses KV pages, batching is invisible, and bad configs are refused by name."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import transformers

from exec.engine.engine import Engine, load_model
from exec.models import model_class, runnable_config
from exec.models.gpt_oss import GptOssForCausalLM, GptOssMoeBlock
from exec.models.model_config import UnsupportedModelError
from exec.runner.model_runner import TorchModelRunner
from shared import EngineConfig, ModelInfo, Req, SamplingParams, Scheduler
from tests.scripted_runner import drive
from tests.test_exec_moe import (
    BATCHED,
    GREEDY,
    PROMPTS,
    SYSTEM,
    SampledLogits,
    check_batched_parity,
)
from tests.tiny_models import hf_logits

# Prompts of 11-13 tokens in 6-token chunks on 4-token pages, so the sliding layer's 6-token
# window spans two or three pages, mixed with decode and prefix-cached (tests.test_exec_moe).


@pytest.fixture(scope="module")
def batched_run(tiny_checkpoint):
    """(engine, outputs, logits by rid, float64 reference) of PROMPTS served together after
    a request that caches SYSTEM."""
    folder, hf = tiny_checkpoint("gpt_oss")
    engine = Engine(folder, **BATCHED)
    engine.generate(SYSTEM, GREEDY)
    recorder = SampledLogits(engine)
    outs = engine.generate(PROMPTS, GREEDY)
    return engine, outs, recorder.by_rid(), copy.deepcopy(hf).double()


def test_gpt_oss_logits_and_greedy_tokens_match_transformers_across_window_pages(batched_run):
    """Every greedy token is transformers' (float64) argmax, and every sampled row's fp32
    logits are within 1e-4 of its, while prompts and outputs run far past the window."""
    engine, outs, logits, reference = batched_run
    check_batched_parity("gpt_oss", engine, outs, logits, reference)
    engine.scheduler.mem.check_idle()


def test_the_window_and_the_sinks_each_change_the_reference(batched_run):
    """The parity above can fail: transformers' logits move by far more than its 1e-4
    tolerance when the sliding layer attends over everything or the sinks are zero."""
    _, outs, _, reference = batched_run
    tokens = PROMPTS[5] + outs[5].token_ids
    base = hf_logits(reference, tokens)
    full = copy.deepcopy(reference)
    full.model.layers[0].self_attn.sliding_window = None
    full.config.layer_types = ["full_attention", "full_attention"]
    sinkless = copy.deepcopy(reference)
    with torch.no_grad():
        for layer in sinkless.model.layers:
            layer.self_attn.sinks.zero_()
    for variant in (full, sinkless):
        assert (hf_logits(variant, tokens) - base).abs().max().item() > 1e-2


def test_gpt_oss_batches_give_each_request_its_tokens_alone(tiny_checkpoint, batched_run):
    """The batched run's greedy tokens are each request's tokens served alone, uncached."""
    _, outs, _, _ = batched_run
    alone = Engine(tiny_checkpoint("gpt_oss")[0], max_total_tokens=256, disable_radix_cache=True,
                   chunked_prefill_size=None)
    assert [o.token_ids for o in outs] == [alone.generate(p, GREEDY).token_ids for p in PROMPTS]


def test_gpt_oss_moe_block_equals_transformers_with_clamped_swiglu_and_biases():
    """Routing (softmax over the top-k biased router logits) and the experts (interleaved
    gate/up, biases, SwiGLU clamped at the limit) equal transformers' GptOssMLP."""
    torch.manual_seed(0)
    hf_config = transformers.GptOssConfig(hidden_size=16, intermediate_size=8,
                                          num_local_experts=6, num_experts_per_tok=3,
                                          num_hidden_layers=1, num_attention_heads=2,
                                          num_key_value_heads=1, head_dim=8)
    hf = transformers.models.gpt_oss.modeling_gpt_oss.GptOssMLP(hf_config)
    for p in hf.parameters():
        torch.nn.init.normal_(p, std=2.0)   # wide enough that the clamp at 7 binds
    config = runnable_config({**hf_config.to_dict(), "architectures": ["GptOssForCausalLM"]})
    ours = GptOssMoeBlock(config)
    ours.load_state_dict(hf.state_dict())
    ours.fuse()
    x = torch.randn(9, 16)
    gate_up = x @ hf.experts.gate_up_proj[0] + hf.experts.gate_up_proj_bias[0]
    assert gate_up[..., ::2].max() > hf_config.swiglu_limit   # the clamp is exercised
    torch.testing.assert_close(ours(x), hf(x[None])[0][0], rtol=1e-5, atol=1e-5)


def test_gpt_oss_is_registered_and_refuses_a_config_without_experts_or_with_other_rope(
        tiny_checkpoint, tmp_path):
    """The registry runs GptOssForCausalLM; a config without num_local_experts, or with a
    rope scaling other than YaRN, is refused naming the field and the file."""
    folder, _ = tiny_checkpoint("gpt_oss")
    d = json.loads((folder / "config.json").read_text())
    assert model_class(runnable_config(d)) is GptOssForCausalLM
    no_experts = {k: v for k, v in d.items() if k != "num_local_experts"}
    llama3 = {**d, "rope_parameters": {"rope_type": "llama3", "factor": 8.0,
                                       "rope_theta": 150000.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 64}}
    for bad, field in ((no_experts, "num_local_experts"), (llama3, "llama3")):
        (tmp_path / "config.json").write_text(json.dumps(bad))
        with pytest.raises(UnsupportedModelError, match=field) as caught:
            Engine(tmp_path, max_total_tokens=64)
        assert str(tmp_path / "config.json") in str(caught.value)


def test_padded_graph_decode_keeps_the_window_of_each_sliding_layer(tiny_checkpoint):
    """Decode run padded through the graph runner (eagerly, on CPU: the conformance kit's
    path) gives the eager runner's logits: its window mask follows each row's position."""
    folder, _ = tiny_checkpoint("gpt_oss")
    info = ModelInfo(256, (0,), 512)
    logits = {}
    for graphs in (True, False):
        config = EngineConfig(max_total_tokens=512, cuda_graph_max_bs=8, disable_cuda_graph=not graphs)
        sched = Scheduler(config, info)
        runner = TorchModelRunner(load_model(folder), sched.config, info)
        recorder = _DecodeLogits(runner)
        reqs = [Req(f"r{i}", list(range(3 + i, 12 + 2 * i)),
                    SamplingParams(max_new_tokens=10, temperature=0, ignore_eos=True))
                for i in range(5)]
        drive(sched, runner, reqs)
        logits[graphs] = torch.cat(recorder.rows)
        assert any(s.graph for s in sched.trace.steps) == graphs
    torch.testing.assert_close(logits[True], logits[False], rtol=0, atol=1e-4)   # fp32, padded shapes


class _DecodeLogits:
    """Wraps a runner's forward and keeps each decode step's logit rows."""

    def __init__(self, runner: TorchModelRunner) -> None:
        self.rows, self._forward = [], runner.forward
        runner.forward = self

    def __call__(self, fb):
        out = self._forward(fb)
        if fb.forward_mode.is_decode():
            self.rows.append(out.logits[: fb.batch_size].clone())
        return out
