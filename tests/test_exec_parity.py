"""exec/ against Hugging Face transformers on the same weights (ARCHITECTURE §6.3)."""

import copy

import pytest
import torch

from exec.engine.engine import Engine
from tests.tiny_models import hf_logits

PROMPTS = [[5, 6, 7, 8, 9], [5, 6, 7, 10], [100, 101], [7] * 12]
STEPS = 32


class LogitRecorder:
    """Wraps a runner's forward to keep each request's next-token logits, step by step
    (not the discarded rows of requests that finished before the step ran: overlap)."""

    def __init__(self, engine):
        self.by_rid: dict[str, list[torch.Tensor]] = {}
        self.records = engine.trace.requests
        self._forward = engine.runner.forward
        engine.runner.forward = self

    def __call__(self, fb):
        out = self._forward(fb)
        for i, rid in enumerate(fb.rids):
            if self.records[rid].finish_reason is None:
                self.by_rid.setdefault(rid, []).append(out.logits[i].clone())
        return out


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "smollm2"])
def test_greedy_tokens_and_logits_match_transformers(tiny_checkpoint, arch):
    """32 greedy steps on 4 prompts give HF's tokens, with fp32 logits within 1e-4 of HF's
    computed in float64. NOTE: float64, because HF's own fp32 logits are up to 8e-5 off
    (qwen3), so against them two independent roundings add up."""
    folder, hf = tiny_checkpoint(arch)
    hf = copy.deepcopy(hf).double()
    engine = Engine(folder, max_total_tokens=1024)
    recorder = LogitRecorder(engine)
    outs = engine.generate(PROMPTS, {"max_new_tokens": STEPS, "temperature": 0, "ignore_eos": True})
    for prompt, out in zip(PROMPTS, outs, strict=True):
        ref = hf_logits(hf, prompt + out.token_ids)[len(prompt) - 1 : -1]   # [STEPS, V]
        assert out.token_ids == ref.argmax(-1).tolist()
        ours = torch.stack(recorder.by_rid[out.rid])                         # [STEPS, V]
        assert (ours - ref).abs().max().item() <= 1e-4


def test_input_logprobs_equal_transformers_log_softmax(tiny_checkpoint):
    """len == len(prompt) - logprob_start_len, first None, the rest HF's log-softmax (1e-4)."""
    folder, hf = tiny_checkpoint("llama")
    engine = Engine(folder, max_total_tokens=1024, chunked_prefill_size=4)
    prompt = [3, 9, 27, 81, 243 % 256, 17, 19, 23, 29]
    out = engine.generate(prompt, {"max_new_tokens": 2, "temperature": 0, "return_logprob": True,
                                   "logprob_start_len": 2})
    lp = out.input_token_logprobs
    assert len(lp) == len(prompt) - 2 and lp[0] is None
    ref = torch.log_softmax(hf_logits(hf, prompt), -1)
    want = [ref[p - 1, prompt[p]].item() for p in range(3, len(prompt))]
    assert max(abs(a - b) for a, b in zip(lp[1:], want, strict=True)) <= 1e-4
    assert len(out.output_token_logprobs) == 2


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_runs_produce_valid_tokens(tiny_checkpoint, dtype):
    """bf16 / fp16 KV and weights run end to end; tokens stay in the vocabulary."""
    folder, _ = tiny_checkpoint("qwen2")
    engine = Engine(folder, dtype=dtype, max_total_tokens=512)
    out = engine.generate(PROMPTS[:2], {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True})
    assert all(len(o.token_ids) == 8 and all(0 <= t < 256 for t in o.token_ids) for o in out)
    assert engine.runner.kv_pool.k.dtype == getattr(torch, dtype)


def test_top_input_logprobs_rank_transformers_best_tokens_first(tiny_checkpoint):
    """top_logprobs_num=3 gives, per prompt position, HF's three most likely next tokens."""
    folder, hf = tiny_checkpoint("qwen3")
    engine = Engine(folder, max_total_tokens=512)
    prompt = [4, 8, 15, 16, 23, 42]
    out = engine.generate(prompt, {"max_new_tokens": 1, "return_logprob": True,
                                   "logprob_start_len": 0, "top_logprobs_num": 3})
    ref = torch.log_softmax(hf_logits(hf, prompt), -1)
    assert out.input_top_logprobs[0] is None and len(out.input_top_logprobs) == len(prompt)
    for p, (ids, vals) in enumerate(out.input_top_logprobs[1:]):
        want = ref[p].topk(3)
        assert ids == want.indices.tolist()
        assert max(abs(a - b) for a, b in zip(vals, want.values.tolist(), strict=True)) <= 1e-4


def test_bf16_runs_unpacked_where_the_cpu_has_no_onednn_bf16(tiny_checkpoint, monkeypatch):
    """On a CPU without oneDNN bf16 kernels (AVX2 only) a bf16 Engine says it runs slowly,
    keeps plain linear layers (never asks oneDNN to pack) and gives the default path's
    greedy tokens."""
    import exec.layers.packed_linear as packed_linear

    folder, _ = tiny_checkpoint("llama")
    params = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
    want = [o.token_ids for o in Engine(folder, dtype="bfloat16", max_total_tokens=512)
            .generate(PROMPTS, params)]
    monkeypatch.setattr(packed_linear, "_cpu_runs_mkldnn_bf16", lambda: False)
    with pytest.warns(UserWarning, match="bfloat16 on this CPU"):
        engine = Engine(folder, dtype="bfloat16", max_total_tokens=512)
    assert not any(isinstance(m, packed_linear.PackedLinear) for m in engine.runner.model.modules())
    assert [o.token_ids for o in engine.generate(PROMPTS, params)] == want


def test_fp16_on_a_cpu_without_onednn_fp16_warns_that_it_runs_slowly(tiny_checkpoint, monkeypatch):
    """float16 where oneDNN has no fp16 kernels for the CPU warns, naming the dtype; float32 does not."""
    import warnings

    import exec.layers.packed_linear as packed_linear

    folder, _ = tiny_checkpoint("llama")
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported", lambda: False, raising=False)
    assert not packed_linear.cpu_has_fast_kernels(torch.float16)
    with pytest.warns(UserWarning, match="float16 on this CPU"):
        Engine(folder, dtype="float16", max_total_tokens=512)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        Engine(folder, dtype="float32", max_total_tokens=512)
    assert not [w for w in seen if "on this CPU" in str(w.message)]
