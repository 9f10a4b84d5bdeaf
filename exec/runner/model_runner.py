"""`TorchModelRunner`: the spec's `ModelRunner` on a real PyTorch model (semantics §9).

`forward(fb)` copies the batch into static device buffers (or, with `copy_to_static=False`,
hands the numpy arrays over without the copy), builds the attention metadata once, runs the
model, and turns the spec's logit rows into logits. Decode batches that `can_run_graph`
accepts (the config's graph sizes) run padded to a captured size (padding rows: seq_len 1,
slot 0): on CUDA by replaying a CUDA graph, elsewhere eagerly on the same padded inputs
(`exec.Engine` disables graphs off CUDA; the conformance kit enables them to test padding). With `torch_compile`, decode batches of at most `torch_compile_max_bs` requests
run `exec.runner.compiled_decode.CompiledDecode` instead (default 32, SGLang's
`--torch-compile-max-bs`). `sample(out, fb)` applies penalties, bias
and the SGLang sampler; the full `SampleResult` of the last call (with output logprobs)
stays in `last_sample`. The KV pool holds what the model's attention caches
(`exec.memory.kv_pool.make_kv_pool`: per-head K and V, or MLA's latent) in `kv_cache_dtype`
(SGLang's names, `exec.memory.kv_cache_dtype`; "auto": the model dtype).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from exec.device.torch_dtype import torch_dtype
from exec.layers.attention import AttentionMetadata
from exec.layers.packed_linear import can_pack, cpu_has_fast_kernels
from exec.memory.kv_cache_dtype import AUTO, kv_storage_dtype
from exec.memory.kv_pool import make_kv_pool
from exec.models import CausalLM, TorchBatch
from exec.runner.compiled_decode import CompiledDecode
from exec.runner.cuda_graph_runner import DecodeGraphRunner
from exec.runner.logits_processor import process_logits
from exec.runner.sampler import SampleResult, sample
from shared.batch.cuda_graph import can_run_graph, cuda_graph_batch_sizes
from shared.batch.forward_batch import ForwardBatch
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.model_runner import RunnerOutput

SLOW_CPU_DTYPE = ("{dtype} on this CPU: oneDNN has no {dtype} kernels for it (bfloat16 needs "
                  "AVX-512 or AVX-NE-CONVERT), so matmuls run torch's generic code, several "
                  "times slower than float32 (the default) on an AVX2-only CPU")


class TorchModelRunner:
    def __init__(self, model: CausalLM, engine_config: EngineConfig, model_info: ModelInfo,
                 *, device: str = "cpu", dtype: str | torch.dtype = "float32",
                 copy_to_static: bool = True, torch_compile: bool = False,
                 torch_compile_max_bs: int = 32, kv_cache_dtype: str = AUTO) -> None:
        self.config = engine_config.resolve(model_info)
        self.model_info = model_info
        self.device = torch.device(device)
        self.dtype = torch_dtype(dtype)
        kv_dtype = kv_storage_dtype(kv_cache_dtype, self.dtype)
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        self.cpu = self.device.type == "cpu"
        pack = can_pack(self.device, self.dtype)
        if self.cpu and not cpu_has_fast_kernels(self.dtype):
            warnings.warn(SLOW_CPU_DTYPE.format(dtype=str(self.dtype).removeprefix("torch.")),
                          stacklevel=3)
        self.model.prepare_for_inference(column_major=self.cpu and self.dtype == torch.float32,
                                         pack=pack)
        self.kv_pool = self.new_kv_pool(model.config, kv_dtype)
        self.window = model.config.sliding_window   # the sliding layers' (HFConfig.layer_window)
        self.copy_to_static = copy_to_static
        capacity = self.config.max_forward_tokens()
        self._static = {name: torch.zeros(capacity, dtype=torch.int64, device=self.device)
                        for name in ("input_ids", "positions", "out_cache_loc")}
        self.graph_sizes = cuda_graph_batch_sizes(self.config)
        self.graphs = (DecodeGraphRunner(self.model, self.kv_pool, self.device, self.config.context_length,
                                        self.graph_sizes, self.window) if self.graph_sizes else None)
        if isinstance(torch_compile_max_bs, bool) or not isinstance(torch_compile_max_bs, int) \
                or torch_compile_max_bs < 1:
            raise ValueError(f"torch_compile_max_bs must be a positive integer, got {torch_compile_max_bs!r}")
        if torch_compile and self.device.type != "cpu":
            raise ValueError(f"torch_compile is the CPU decode path (built and tested there); "
                             f"on {self.device.type} use the default (CUDA decode replays CUDA graphs)")
        self.compiled = CompiledDecode(self.model) if torch_compile else None
        self.compile_max_bs = torch_compile_max_bs
        self.last_sample: SampleResult | None = None

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch) -> RunnerOutput:
        if not self.cpu:
            return self._forward(fb)
        # NOTE: subnormal floats slow CPU matmuls down 4x or more and carry no information
        # in inference; flushing them is a process-wide CPU flag, so it is on only here.
        torch.set_flush_denormal(True)
        try:
            return self._forward(fb)
        finally:
            torch.set_flush_denormal(False)

    def _forward(self, fb: ForwardBatch) -> RunnerOutput:
        if self.graphs is not None and can_run_graph(fb, self.graph_sizes):
            logits, padded = self.graphs.replay(fb)
            return RunnerOutput(fb.logit_rows, tuple(logits.shape), logits, graph=True,
                                padded_batch_size=padded)
        model = self.compiled if self._compiled_step(fb) else self.model
        hidden = model(self._tensor(fb, "input_ids"), self._tensor(fb, "positions"),
                       self.torch_batch(fb))                             # [T, H]
        out = process_logits(self.compute_logits, hidden, fb)
        return RunnerOutput(fb.logit_rows, tuple(out.next_token_logits.shape),
                            out.next_token_logits, out.input_token_logprobs, out.input_top_logprobs,
                            graph=False, padded_batch_size=fb.batch_size)

    def _compiled_step(self, fb: ForwardBatch) -> bool:
        return (self.compiled is not None and fb.forward_mode.is_decode()
                and fb.batch_size <= self.compile_max_bs)

    @torch.inference_mode()
    def sample(self, output: RunnerOutput, fb: ForwardBatch) -> np.ndarray:
        positions = fb.positions if fb.forward_mode.is_decode() else fb.seq_lens - 1  # [B]
        self.last_sample = sample(output.logits, fb.sampling_params, fb.output_ids,
                                  fb.sampling_seeds, positions, self.model_info.eos_token_ids)
        return self.last_sample.next_token_ids.cpu().numpy()

    def new_kv_pool(self, config, kv_dtype: torch.dtype):
        """The KV pool of `config` (`exec.runner.tp_model_runner` keeps one rank's heads)."""
        return make_kv_pool(config, self.config.max_total_tokens, self.config.page_size,
                            kv_dtype, self.device)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [R, H] -> float32 logits [R, V] (`exec.runner.tp_model_runner` gathers shards)."""
        return self.model.compute_logits(hidden)

    def torch_batch(self, fb: ForwardBatch) -> TorchBatch:
        if fb.forward_mode.is_decode():
            prefix, extend = fb.seq_lens - 1, np.ones(fb.batch_size, np.int64)
        else:
            prefix, extend = fb.extend_prefix_lens, fb.extend_seq_lens
        meta = AttentionMetadata.build(fb.req_to_token, fb.req_pool_indices, fb.seq_lens,
                                       prefix, extend, self.device, self.window)
        return TorchBatch(self._tensor(fb, "out_cache_loc"), meta, self.kv_pool)

    def _tensor(self, fb: ForwardBatch, name: str) -> torch.Tensor:
        """[T] int64 on the device: a view of the static buffer, or a fresh tensor."""
        src = torch.from_numpy(np.ascontiguousarray(getattr(fb, name), dtype=np.int64))
        if not self.copy_to_static:
            return src.to(self.device)
        buf = self._static[name][: len(src)]
        buf.copy_(src, non_blocking=True)
        return buf
