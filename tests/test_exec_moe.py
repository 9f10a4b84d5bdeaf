"""Mixture-of-experts models in exec (issue 20 §2): Mixtral and Qwen3-MoE against Hugging Face
transformers on the same weights, batching invisible to them, and bad configs refused
before anything is loaded."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import transformers

from exec.engine.engine import Engine
from exec.layers.packed_linear import PackedLinear
from exec.models import MODELS, model_class, runnable_config
from exec.models.model_config import UnsupportedModelError
from exec.models.moe_block import SparseMoeBlock
from exec.models.qwen3_moe import EXPERT_NAMES
from shared.config.hf_config import HFConfig
from tests.tiny_models import hf_logits

ARCHS = ("mixtral", "qwen3_moe")
SYSTEM = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
PROMPTS = [SYSTEM + [30 + i, 40 + i, 50 + i][: 1 + i % 3] for i in range(4)] + [[9, 8, 7], [200] * 13]
GREEDY = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
# Paged, chunked (prompts of 11-13 tokens in chunks of 6), mixed with decode, prefix-cached.
BATCHED = dict(max_total_tokens=1024, page_size=4, chunked_prefill_size=6, enable_mixed_chunk=True)


class SampledLogits:
    """Wraps a runner's forward; `by_rid()` gives each request's next-token logits, one row per
    token it sampled (not chunked-prefill rows, nor the discarded rows of overlap)."""

    def __init__(self, engine: Engine) -> None:
        self.engine, self.forwards, self._forward = engine, [], engine.runner.forward
        self.first_step = len(engine.trace.steps)
        engine.runner.forward = self

    def __call__(self, fb):
        out = self._forward(fb)
        self.forwards.append((fb.rids, out.logits.clone()))
        return out

    def by_rid(self) -> dict[str, torch.Tensor]:
        rows: dict[str, list[torch.Tensor]] = {}
        steps = self.engine.trace.steps[self.first_step:]
        for (rids, logits), step in zip(self.forwards, steps, strict=True):
            for i, rid in enumerate(rids):
                if step.next_token_ids[i] != -1 and i not in step.overlap_rows:
                    rows.setdefault(rid, []).append(logits[i])
        return {rid: torch.stack(r) for rid, r in rows.items()}


def check_batched_parity(name: str, engine: Engine, outs, logits: dict[str, torch.Tensor],
                         reference) -> None:
    """The batched run of PROMPTS against `reference` (transformers in float64): each greedy
    token its argmax, each sampled row's fp32 logits within 1e-4; the prompts after SYSTEM
    hit the prefix cache, and the run mixed chunks, decoded and chunked a prefill."""
    worst = 0.0
    for prompt, out in zip(PROMPTS, outs, strict=True):
        ref = hf_logits(reference, prompt + out.token_ids)[len(prompt) - 1 : -1]   # [16, V]
        assert out.token_ids == ref.argmax(-1).tolist()
        worst = max(worst, (logits[out.rid] - ref).abs().max().item())
    print(f"{name}: max |logit - transformers| = {worst:.2e}")
    assert worst <= 1e-4
    assert all(o.meta["cached_tokens"] >= len(SYSTEM) - BATCHED["page_size"] for o in outs[:4])
    assert {"MIXED", "DECODE"} <= {s.forward_mode for s in engine.trace.steps}
    assert any(-1 in s.next_token_ids for s in engine.trace.steps)   # a chunked prefill ran


@pytest.fixture(scope="module", params=ARCHS)
def batched_run(request, tiny_checkpoint):
    """(arch, engine, outputs, logits by rid) of PROMPTS served together after a request that
    caches SYSTEM."""
    folder, _ = tiny_checkpoint(request.param)
    engine = Engine(folder, **BATCHED)
    engine.generate(SYSTEM, GREEDY)
    recorder = SampledLogits(engine)
    outs = engine.generate(PROMPTS, GREEDY)
    return request.param, engine, outs, recorder.by_rid()


def test_moe_logits_and_greedy_tokens_match_transformers(tiny_checkpoint, batched_run):
    """A packed, prefix-cached, chunked, mixed batch: HF's greedy tokens, fp32 logits within
    1e-4 of HF's in float64 (the reference, as tests/test_exec_parity.py)."""
    arch, engine, outs, logits = batched_run
    check_batched_parity(arch, engine, outs, logits,
                         copy.deepcopy(tiny_checkpoint(arch)[1]).double())


def test_moe_batches_give_each_request_its_tokens_alone(tiny_checkpoint, batched_run):
    """The batched run's greedy tokens are each request's tokens served alone, uncached."""
    arch, engine, outs, _ = batched_run
    alone = Engine(tiny_checkpoint(arch)[0], max_total_tokens=256, disable_radix_cache=True,
                   chunked_prefill_size=None)
    assert [o.token_ids for o in outs] == [alone.generate(p, GREEDY).token_ids for p in PROMPTS]
    engine.scheduler.mem.check_idle()


def test_moe_weights_pack_attention_and_dense_layers_and_stack_experts(batched_run):
    """On CPU the Engine pre-packs attention, dense MLPs, routers and the LM head; each sparse
    layer's experts become two stacked tensors [E, 2I, H] and [E, H, I]."""
    arch, engine, _, _ = batched_run
    model = engine.runner.model
    assert type(model) is model_class(model.config)
    assert MODELS[model.config.names[0]] == (arch, type(model).__name__)
    for layer in model.model.layers:
        assert isinstance(layer.self_attn.qkv_proj, PackedLinear)
        ffn = layer.ffn
        if isinstance(ffn, SparseMoeBlock):
            moe = model.config.moe
            width, hidden = moe.expert_intermediate_size, model.config.hidden_size
            assert isinstance(ffn.gate, PackedLinear) and not hasattr(ffn, "experts")
            assert ffn.gate_up.shape == (moe.num_experts, 2 * width, hidden)
            assert ffn.down.shape == (moe.num_experts, hidden, width)
        else:
            assert isinstance(ffn.gate_up_proj, PackedLinear)
    sparse = [isinstance(layer.ffn, SparseMoeBlock) for layer in model.model.layers]
    assert sparse == list(model.config.moe.sparse_layers)
    if arch == "qwen3_moe":
        assert sparse == [False, True, False, False]   # decoder_sparse_step 2, mlp_only_layers [3]


@pytest.mark.parametrize("norm_topk_prob", [False, True])
def test_qwen3_moe_block_equals_transformers_with_and_without_renormalising(norm_topk_prob):
    """Routing and grouped experts equal transformers' sparse block (eager experts) on the
    same weights, whether or not the top-k weights are renormalised."""
    torch.manual_seed(0)
    hf_config = transformers.Qwen3MoeConfig(hidden_size=16, num_experts=6, num_experts_per_tok=3,
                                            moe_intermediate_size=8, norm_topk_prob=norm_topk_prob,
                                            experts_implementation="eager")
    hf = transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock(hf_config)
    for p in hf.parameters():
        torch.nn.init.normal_(p)
    config = runnable_config({**hf_config.to_dict(), "architectures": ["Qwen3MoeForCausalLM"]})
    ours = SparseMoeBlock(16, config.moe, EXPERT_NAMES)
    ours.fuse()
    with torch.no_grad():
        ours.gate.weight.copy_(hf.gate.weight)
        ours.gate_up.copy_(hf.experts.gate_up_proj)
        ours.down.copy_(hf.experts.down_proj)
    x = torch.randn(9, 16)
    torch.testing.assert_close(ours(x), hf(x[None])[0], rtol=1e-5, atol=1e-5)


def _config_without(tiny_checkpoint, tmp_path, arch: str, key: str):
    d = json.loads((tiny_checkpoint(arch)[0] / "config.json").read_text())
    del d[key]
    (tmp_path / "config.json").write_text(json.dumps(d))   # no weights: nothing to load
    return tmp_path


@pytest.mark.parametrize(("arch", "key"), [("mixtral", "num_experts_per_tok"),
                                           ("qwen3_moe", "num_experts_per_tok"),
                                           ("mixtral", "num_local_experts")])
def test_a_moe_config_missing_a_routing_field_is_refused_naming_it(tiny_checkpoint, tmp_path,
                                                                   arch, key):
    """One UnsupportedModelError naming the field and the file, raised from config.json alone
    (the folder holds no weights)."""
    folder = _config_without(tiny_checkpoint, tmp_path, arch, key)
    with pytest.raises(UnsupportedModelError, match=key) as caught:
        Engine(folder, max_total_tokens=64)
    assert str(folder / "config.json") in str(caught.value)


def test_an_unregistered_architecture_is_refused_listing_the_registered_ones(tmp_path):
    """A config.json of an architecture the registry lacks (Qwen2-MoE, which shared/ reads)
    is refused naming it and every registered architecture, before any weight is read."""
    config = transformers.Qwen2MoeConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1)
    config.architectures = ["Qwen2MoeForCausalLM"]
    config.save_pretrained(tmp_path)
    with pytest.raises(UnsupportedModelError, match="Qwen2MoeForCausalLM") as caught:
        Engine(tmp_path, max_total_tokens=64)
    assert all(name in str(caught.value) for name in MODELS)
    with pytest.raises(UnsupportedModelError, match="Qwen2MoeForCausalLM"):
        model_class(HFConfig.from_file(tmp_path))
