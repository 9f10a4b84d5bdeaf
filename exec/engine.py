"""`Engine`: offline generation with a Hugging Face checkpoint on CPU, CUDA or NPU, driven
by the spec's `Scheduler` (DESIGN §5).

    engine = Engine("path/to/SmolLM2-135M", device="cpu", max_total_tokens=8192)
    out = engine.generate("The capital of France is", {"max_new_tokens": 16, "temperature": 0})
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from exec.generate_output import GenerateOutput
from exec.kv_capacity import default_kv_capacity
from exec.llama import LlamaForCausalLM
from exec.loader import load_generation_eos, load_tokenizer, load_weights
from exec.logprob_collector import LogprobCollector
from exec.model_config import ModelConfig
from exec.model_runner import TorchModelRunner, torch_dtype
from shared.engine_config import EngineConfig, ModelInfo
from shared.forward_batch import ForwardBatch
from shared.invalid_request import InvalidRequestError
from shared.req import Req
from shared.sampling_params import SamplingParams
from shared.scheduler import Scheduler
from shared.trace import Trace
from shared.validation import validate_request

Prompt = str | Sequence[int]


def load_model(folder: str | Path, *, device: str = "cpu", dtype: str = "float32") -> LlamaForCausalLM:
    """A Llama-family model with the checkpoint's weights, on `device` in `dtype`."""
    config = ModelConfig.from_file(folder)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to_empty(device=device).to(torch_dtype(dtype))
    load_weights(model, folder, dtype=torch_dtype(dtype), device=device)
    return model


class Engine:
    """`Engine(model, *, device="cpu", dtype="float32", **engine_args)`: `model` is a
    checkpoint folder; `engine_args` are `EngineConfig` fields. `random_seed` seeds the
    sampling of requests that bring no `sampling_seed` (request k of the engine's life gets
    seed random_seed * 1_000_003 + k). Without `max_total_tokens` the KV pool takes a
    fraction of free memory (see `exec.kv_capacity.default_kv_capacity`)."""

    def __init__(self, model: str | Path, *, device: str = "cpu", dtype: str = "float32",
                 **engine_args: Any) -> None:
        folder = Path(model)
        self.model_config = ModelConfig.from_file(folder)
        self.tokenizer = load_tokenizer(folder)
        eos = tuple(dict.fromkeys(self.model_config.eos_token_ids + load_generation_eos(folder)))
        self.model_info = ModelInfo(self.model_config.vocab_size, eos, self.model_config.context_length)
        if torch.device(device).type != "cuda":
            engine_args["disable_cuda_graph"] = True
        config = _engine_config(engine_args)
        weights = load_model(folder, device=device, dtype=dtype)
        capacity = None if config.max_total_tokens else default_kv_capacity(self.model_config, device, dtype)
        self.scheduler = Scheduler(config, self.model_info, kv_capacity=capacity)
        self.runner = TorchModelRunner(weights, self.scheduler.config, self.model_info,
                                       device=device, dtype=dtype)
        self.trace.model_config = self.model_config.raw
        self.trace.executor = {"kind": "exec", "device": str(torch.device(device)), "dtype": dtype}
        self.logprobs = LogprobCollector()
        self._t0 = time.perf_counter()
        self._count = 0

    @property
    def trace(self) -> Trace:
        return self.scheduler.trace

    def now(self) -> float:
        """Seconds since the engine started: the clock of its trace."""
        return time.perf_counter() - self._t0

    def generate(self, prompts: Prompt | Sequence[Prompt], sampling_params: Any = None
                 ) -> GenerateOutput | list[GenerateOutput]:
        """Generate for one prompt (str or token ids) or a list of them. `sampling_params`:
        None, one SamplingParams / dict for all, or one per prompt. The whole list is
        validated before anything runs: a bad prompt raises InvalidRequestError naming its
        index, and the engine is left as it was."""
        single = isinstance(prompts, str) or (len(prompts) > 0 and isinstance(prompts[0], (int, np.integer)))
        plist = [prompts] if single else list(prompts)
        reqs = self._build_requests(plist, _per_prompt(sampling_params, len(plist)))
        for r in reqs:
            self.scheduler.add_request(r)
        outputs = self._run(reqs)
        return outputs[0] if single else outputs

    def abort(self, rid: str) -> bool:
        return self.scheduler.abort(rid)

    def _build_requests(self, prompts: list[Prompt], params: list[SamplingParams]) -> list[Req]:
        cfg, reqs = self.scheduler.config, []
        for i, (p, sp) in enumerate(zip(prompts, params, strict=True)):
            ids = self._tokenize(i, p)
            try:
                validate_request(ids, sp, vocab_size=self.model_info.vocab_size,
                                 context_len=cfg.context_length, max_total_tokens=cfg.max_total_tokens,
                                 page_size=cfg.page_size)
            except InvalidRequestError as e:
                raise InvalidRequestError(e.field, e.value, f"prompt {i}: {e.reason}") from None
            reqs.append((ids, sp))
        return [self._new_req(ids, sp) for ids, sp in reqs]

    def _tokenize(self, i: int, prompt: Prompt) -> list[int]:
        if not isinstance(prompt, str):
            return [int(t) for t in prompt]
        if self.tokenizer is None:
            raise InvalidRequestError("prompt", prompt, f"prompt {i}: text given but the model has "
                                      "no tokenizer.json; pass token ids")
        return self.tokenizer.encode(prompt, add_special_tokens=True).ids

    def _new_req(self, ids: list[int], sp: SamplingParams) -> Req:
        k, self._count = self._count, self._count + 1
        if sp.sampling_seed is None:
            sp = dataclasses.replace(sp, sampling_seed=self.scheduler.config.random_seed * 1_000_003 + k)
        return Req(f"req-{k}", ids, sp, arrival_time=self.now())

    def _run(self, reqs: list[Req]) -> list[GenerateOutput]:
        pending = {r.rid for r in reqs}
        with tqdm(total=len(reqs), desc="generate", unit="req", delay=3.0) as bar:
            while pending:
                done = self._step()
                if done is None:
                    raise RuntimeError(f"scheduler stopped with {len(pending)} request(s) unfinished")
                finished = pending & {r.rid for r in done}
                pending -= finished
                bar.update(len(finished))
        return [self._output(r) for r in reqs]

    def _step(self) -> list[Req] | None:
        batch = self.scheduler.get_next_batch_to_run(self.now())
        if batch is None:
            return None
        fb = ForwardBatch.init_new(batch)
        out = self.runner.forward(fb)
        ids = self.runner.sample(out, fb)
        self.logprobs.collect(batch, fb, out, self.runner.last_sample)
        return self.scheduler.process_batch_result(batch, out, ids, self.now())

    def _output(self, req: Req) -> GenerateOutput:
        rec = self.trace.requests[req.rid]
        text = self.tokenizer.decode(req.output_ids, skip_special_tokens=True) if self.tokenizer else None
        lp = self.logprobs.pop(req)
        return GenerateOutput(
            req.rid, text, list(req.output_ids), req.finished_reason, lp.input_token_logprobs,
            lp.input_top_logprobs, lp.output_token_logprobs,
            {"prompt_tokens": len(req.origin_input_ids), "cached_tokens": rec.cached_tokens,
             "completion_tokens": len(req.output_ids), "ttft": rec.first_token_time - rec.arrival_time,
             "e2e": rec.finish_time - rec.arrival_time})


def _engine_config(engine_args: dict[str, Any]) -> EngineConfig:
    names = {f.name for f in dataclasses.fields(EngineConfig)}
    unknown = sorted(set(engine_args) - names)
    if unknown:
        raise TypeError(f"unknown engine argument(s) {unknown}; EngineConfig fields are {sorted(names)}")
    return EngineConfig(**engine_args)


def _per_prompt(sampling_params: Any, n: int) -> list[SamplingParams]:
    if sampling_params is None or isinstance(sampling_params, (SamplingParams, dict)):
        return [_as_params(sampling_params)] * n
    params = list(sampling_params)
    if len(params) != n:
        raise InvalidRequestError("sampling_params", len(params),
                                  f"{len(params)} sampling params for {n} prompts")
    return [_as_params(p) for p in params]


def _as_params(p: SamplingParams | dict | None) -> SamplingParams:
    if p is None:
        return SamplingParams()
    return p if isinstance(p, SamplingParams) else SamplingParams.from_dict(p)
