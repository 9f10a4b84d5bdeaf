"""Loading a llama.cpp GGUF file: config, dequantised weights, tokenizer and chat template.

    loaded = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", device="cpu", dtype="float32")
    loaded.model  # a LlamaForCausalLM, like exec.engine.engine.load_model(folder)

Metadata under `{arch}.*` becomes a Hugging Face style config dict for `ModelConfig.from_dict`
(architectures llama, qwen2, qwen3). Weights are read through the file's memory map, one
tensor at a time: dequantised to float32 with `gguf.quants`, un-permuted where llama.cpp's
converter permuted them, cast, and copied into a model built on the meta device and then
allocated once on `device`. Peak memory is the model plus two float32 copies of its
largest tensor (dequantised, then un-permuted); the file stays in the page cache.

Llama 3 rope scaling has no metadata in a GGUF: the converter stores the per-frequency
divisors as a `rope_freqs.weight` tensor. Its llama3 parameters are recovered from those
divisors and checked to reproduce them exactly (else UnsupportedModelError).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader, ReaderTensor
from gguf.quants import dequantize
from tokenizers import Tokenizer

from exec.device.torch_dtype import torch_dtype
from exec.layers.rotary import inv_frequencies
from exec.loading.gguf_tokenizer import build_tokenizer, default_add_bos
from exec.loading.loader import CheckpointError
from exec.models import CausalLM, model_class, runnable_config
from exec.models.model_config import ModelConfig, UnsupportedModelError

Q = GGMLQuantizationType
SUPPORTED_TYPES = (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1,
                   Q.Q4_K, Q.Q5_K, Q.Q6_K)
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM"}
# NOTE: llama.cpp rotates interleaved pairs for `llama`, so its converter permutes the rows of
# attn_q / attn_k; qwen2 and qwen3 use the rotate-half layout and are stored as in HF.
PERMUTED_QK = ("llama",)
GLOBAL_TENSORS = {"token_embd.weight": "model.embed_tokens.weight",
                  "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight", "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_gate.bias": "mlp.gate_proj.bias",
    "ffn_up.weight": "mlp.up_proj.weight", "ffn_up.bias": "mlp.up_proj.bias",
    "ffn_down.weight": "mlp.down_proj.weight", "ffn_down.bias": "mlp.down_proj.bias",
}
LAYER_NAME = re.compile(r"blk\.(\d+)\.(.+)")
ROPE_FREQS = "rope_freqs.weight"
MAX_LISTED = 5


class GGUFModel(NamedTuple):
    config: ModelConfig
    model: CausalLM
    tokenizer: Tokenizer | None    # None when the file has no vocabulary
    chat_template: str | None
    bos_token_id: int | None
    add_bos_token: bool            # the tokenizer never adds BOS; the caller prepends it


class Metadata:
    """Typed access to a GGUF's key-value metadata, with errors naming the file."""

    def __init__(self, reader: GGUFReader, path: Path) -> None:
        self.reader, self.path = reader, path

    def get(self, key: str, default: Any = None) -> Any:
        field = self.reader.get_field(key)
        return default if field is None else field.contents()

    def require(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            raise CheckpointError(f"{self.path}: GGUF metadata has no {key!r}")
        return value


def load_gguf(path: str | Path, *, device: str = "cpu", dtype: str = "float32") -> GGUFModel:
    """The model, tokenizer and chat template of the GGUF file at `path`, on `device` in `dtype`.

    Raises CheckpointError (file unreadable, metadata missing, a tensor unknown, missing or of
    the wrong shape: checked before any weight is read) and UnsupportedModelError (architecture,
    GGML type, rope scaling or tokenizer not supported, each named).
    """
    path = Path(path)
    reader = open_reader(path)
    meta = Metadata(reader, path)
    tensors = {t.name: t for t in reader.tensors}
    config = runnable_config(gguf_config_dict(meta, tensors))
    tokenizer, add_bos = _tokenizer(meta)
    with torch.device("meta"):
        model = model_class(config)(config)
    plan = _plan(dict(model.named_parameters()), tensors, path)
    model = model.to(torch_dtype(dtype)).to_empty(device=device).eval()
    _fill(model, plan, config)
    bos = meta.get("tokenizer.ggml.bos_token_id")
    return GGUFModel(config, model, tokenizer, meta.get("tokenizer.chat_template"),
                     None if bos is None else int(bos), add_bos)


def gguf_config_dict(meta: Metadata, tensors: Mapping[str, ReaderTensor]) -> dict[str, Any]:
    """A Hugging Face style config dict (what `ModelConfig.from_dict` reads) from the metadata."""
    arch = meta.require("general.architecture")
    if arch not in ARCHITECTURES:
        raise UnsupportedModelError(f"GGUF architecture {arch!r} is not supported (supported: "
                                    f"{', '.join(ARCHITECTURES)})")
    hidden = int(meta.require(f"{arch}.embedding_length"))
    heads = int(meta.require(f"{arch}.attention.head_count"))
    head_dim = int(meta.get(f"{arch}.attention.key_length", hidden // heads))
    _require_equal(meta, f"{arch}.attention.value_length", head_dim, "value heads differ from key heads")
    _require_equal(meta, f"{arch}.rope.dimension_count", head_dim, "partial rotary is not supported")
    theta = _decimal(meta.get(f"{arch}.rope.freq_base", 10000.0))
    vocab = meta.get(f"{arch}.vocab_size") or \
        _torch_shape(_required_tensor(tensors, "token_embd.weight", meta.path))[0]
    kv_key = f"{arch}.attention.head_count_kv"
    return {
        "architectures": [ARCHITECTURES[arch]], "model_type": arch, "vocab_size": int(vocab),
        "hidden_size": hidden, "intermediate_size": int(meta.require(f"{arch}.feed_forward_length")),
        "num_hidden_layers": int(meta.require(f"{arch}.block_count")),
        "num_attention_heads": heads, "num_key_value_heads": _uniform(meta.get(kv_key, heads), kv_key),
        "head_dim": head_dim,
        "rms_norm_eps": _decimal(meta.require(f"{arch}.attention.layer_norm_rms_epsilon")),
        "rope_theta": theta, "rope_scaling": _rope_scaling(meta, arch, tensors, head_dim, theta),
        "max_position_embeddings": int(meta.require(f"{arch}.context_length")),
        "tie_word_embeddings": "output.weight" not in tensors,
        "attention_bias": arch == "llama" and "blk.0.attn_q.bias" in tensors,
        "mlp_bias": "blk.0.ffn_up.bias" in tensors,
        "eos_token_id": _eos_ids(meta), "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
    }


def dequantize_tensor(name: str, data: np.ndarray, qtype: GGMLQuantizationType,
                      shape: tuple[int, ...]) -> np.ndarray:
    """A writable float32 array of torch `shape` from a tensor's raw GGUF data.

    Raises UnsupportedModelError naming the tensor and its GGML type when the type is not
    one of SUPPORTED_TYPES, and CheckpointError when the data does not hold `shape`.
    """
    check_type(name, qtype)
    # NOTE: a plain ndarray view of the memory map skips np.memmap's per-slice overhead.
    out = dequantize(data.view(np.ndarray), qtype)
    if out.size != math.prod(shape):
        raise CheckpointError(f"tensor {name!r}: {_type_name(qtype)} data holds {out.size} "
                              f"values, shape {shape} needs {math.prod(shape)}")
    out = out.reshape(shape).astype(np.float32, copy=False)
    return out if out.flags.writeable else out.copy()


def check_type(name: str, qtype: GGMLQuantizationType) -> None:
    """Raise UnsupportedModelError naming the tensor and its GGML type unless we dequantise it."""
    if qtype not in SUPPORTED_TYPES:
        raise UnsupportedModelError(
            f"tensor {name!r} has GGML type {_type_name(qtype)}, which is not supported "
            f"(supported: {', '.join(t.name for t in SUPPORTED_TYPES)})")


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's `permute` (convert_hf_to_gguf): within each head, rows [first half; second
    half] become interleaved pairs. w: [n_head * head_dim, ...] (a weight or a bias)."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of `permute_qk`: GGUF's interleaved rows back to Hugging Face's order.
    n_head is num_heads for attn_q and num_kv_heads for attn_k."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_scaling_from_factors(factors: np.ndarray, head_dim: int, theta: float,
                                original_context: int | None = None) -> dict[str, Any] | None:
    """The llama3 `rope_scaling` dict whose frequencies are `inv_freq / factors` (the
    `rope_freqs` divisors), or None when every divisor is 1.

    `factor` is the largest divisor. The medium band's smoothing is linear in 1 / wavelength,
    which fixes the two band edges, original_context / low_freq_factor and
    original_context / high_freq_factor; the original context (when not given) is taken as
    the low edge, so low_freq_factor is 1 as in every Llama 3 config. Raises
    UnsupportedModelError unless the dict reproduces every divisor (rtol 1e-4).
    """
    factors = np.asarray(factors, dtype=np.float64)
    if np.allclose(factors, 1.0, rtol=0, atol=1e-6):
        return None
    factor = float(factors.max())
    medium = (factors > 1 + 1e-6) & (factors < factor * (1 - 1e-6))
    if medium.sum() < 2:
        raise UnsupportedModelError(f"cannot recover llama3 rope scaling from {ROPE_FREQS} "
                                    f"({int(medium.sum())} smoothed frequencies, need 2)")
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    smooth = (1 / factors[medium] - 1 / factor) / (1 - 1 / factor)
    # smooth = (context / wavelen - low) / (high - low): 0 at the low edge, 1 at the high one
    slope, intercept = np.polyfit(inv[medium] / (2 * math.pi), smooth, 1)
    low_edge, high_edge = -slope / intercept, slope / (1 - intercept)
    context = original_context or round(low_edge)
    scaling = {"rope_type": "llama3", "factor": round(factor, 4),
               "low_freq_factor": round(context / low_edge, 4),
               "high_freq_factor": round(context / high_edge, 4),
               "original_max_position_embeddings": context}
    ours = inv_frequencies(head_dim, theta, scaling).double().numpy()
    if not np.allclose(ours, inv / factors, rtol=1e-4, atol=0):
        raise UnsupportedModelError(f"{ROPE_FREQS} is not a llama3 rope scaling (best fit "
                                    f"{scaling} does not reproduce it)")
    return scaling


class _PlainArrayReader(GGUFReader):
    """gguf's reader over a plain ndarray view of its memory map: the same bytes, still
    mapped, but slicing skips np.memmap's Python-level `__array_finalize__`, which the reader
    runs once per string of the vocabulary and merges (0.8 s against 2.2 s for SmolLM2-135M's
    header on an AMD EPYC, AVX2). NOTE: `data` is the attribute the reader reads everything
    through; its constructor assigns the np.memmap to it."""

    @property
    def data(self) -> np.ndarray:
        return self._data

    @data.setter
    def data(self, mapped: np.memmap) -> None:
        self._data = mapped.view(np.ndarray)


def open_reader(path: Path) -> GGUFReader:
    """The file's reader; CheckpointError naming the file when it is absent or unreadable.

    NOTE: gguf's reader fails on a truncated or corrupt file with whatever numpy raises
    where the bytes run out (a reshape ValueError, an IndexError), so both mean "corrupt".
    """
    if not path.is_file():
        raise CheckpointError(f"no GGUF file at {path}")
    try:
        return _PlainArrayReader(path, "r")
    except OSError as e:
        raise CheckpointError(f"cannot read GGUF file {path}: {e}") from e
    except (ValueError, IndexError) as e:
        raise CheckpointError(f"GGUF file {path} is truncated or corrupt "
                              f"({path.stat().st_size} bytes; the reader failed: {e})") from e


def _require_equal(meta: Metadata, key: str, expected: int, why: str) -> None:
    value = meta.get(key)
    if value is not None and int(value) != expected:
        raise UnsupportedModelError(f"{key} = {value} but head_dim = {expected}: {why}")


def _uniform(value: Any, key: str) -> int:
    """An int, or a per-layer list whose entries are all equal."""
    values = set(value) if isinstance(value, list) else {value}
    if len(values) != 1:
        raise UnsupportedModelError(f"{key} differs between layers ({sorted(values)}); not supported")
    return int(values.pop())


def _rope_scaling(meta: Metadata, arch: str, tensors: Mapping[str, ReaderTensor],
                  head_dim: int, theta: float) -> dict[str, Any] | None:
    """Scaling from `rope.scaling.*` (ModelConfig refuses the kinds it cannot run) or from a
    `rope_freqs` tensor (llama3)."""
    kind = meta.get(f"{arch}.rope.scaling.type", "none")
    original = meta.get(f"{arch}.rope.scaling.original_context_length")
    if kind != "none":
        return {"rope_type": kind, "factor": _decimal(meta.get(f"{arch}.rope.scaling.factor", 1.0)),
                "original_max_position_embeddings": original}
    if ROPE_FREQS not in tensors:
        return None
    t = tensors[ROPE_FREQS]
    factors = dequantize_tensor(t.name, t.data, t.tensor_type, _torch_shape(t))
    return llama3_scaling_from_factors(factors, head_dim, theta,
                                       None if original is None else int(original))


def _eos_ids(meta: Metadata) -> list[int]:
    """EOS, EOT and EOM ids (llama.cpp stops on each), in that order, without repeats."""
    ids = [meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
    return list(dict.fromkeys(int(i) for i in ids if i is not None))


def _tokenizer(meta: Metadata) -> tuple[Tokenizer | None, bool]:
    model, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre")
    tokenizer = build_tokenizer(model, pre, meta.get("tokenizer.ggml.tokens", []),
                                meta.get("tokenizer.ggml.merges", []),
                                meta.get("tokenizer.ggml.token_type"))
    if tokenizer is None:
        return None, False
    return tokenizer, bool(meta.get("tokenizer.ggml.add_bos_token", default_add_bos(pre)))


def _our_name(name: str) -> str | None:
    """Our (Hugging Face) parameter name for a GGUF tensor name, or None when unknown."""
    if name in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[name]
    m = LAYER_NAME.fullmatch(name)
    if m is None or m.group(2) not in LAYER_TENSORS:
        return None
    return f"model.layers.{m.group(1)}.{LAYER_TENSORS[m.group(2)]}"


def _torch_shape(t: ReaderTensor) -> tuple[int, ...]:
    """NOTE: GGUF lists dimensions fastest-first (ggml's ne), the reverse of torch."""
    return tuple(int(n) for n in reversed(t.shape))


def _required_tensor(tensors: Mapping[str, ReaderTensor], name: str, path: Path) -> ReaderTensor:
    if name not in tensors:
        raise CheckpointError(f"{path} has no tensor {name!r}")
    return tensors[name]


def _plan(params: Mapping[str, torch.Tensor], tensors: Mapping[str, ReaderTensor],
          path: Path) -> list[tuple[ReaderTensor, str]]:
    """(GGUF tensor, parameter name) pairs, after checking names, shapes and GGML types."""
    plan, unknown = [], []
    for name, t in tensors.items():
        if name == ROPE_FREQS:  # read into the config's rope scaling
            continue
        ours = _our_name(name)
        if ours is None or ours not in params:
            unknown.append(repr(name))
            continue
        check_type(name, t.tensor_type)
        expected, got = tuple(params[ours].shape), _torch_shape(t)
        if expected != got:
            raise CheckpointError(f"tensor {name!r} ({ours}) in {path}: model expects shape "
                                  f"{expected}, file has {got}")
        plan.append((t, ours))
    missing = [repr(n) for n in sorted(set(params) - {ours for _, ours in plan})]
    problems = ([f"tensors the model does not have: {_listed(unknown)}"] if unknown else []) + \
        ([f"model tensors missing from the file: {_listed(missing)}"] if missing else [])
    if problems:
        raise CheckpointError(f"GGUF file {path} does not fit the model; " + "; ".join(problems))
    return plan


@torch.no_grad()
def _fill(model: CausalLM, plan: list[tuple[ReaderTensor, str]], config: ModelConfig) -> None:
    """Dequantise, un-permute and copy each planned tensor into its parameter, one at a time."""
    params = dict(model.named_parameters())
    heads = {"attn_q": config.num_heads, "attn_k": config.num_kv_heads}
    permuted = config.arch in PERMUTED_QK
    for t, ours in plan:
        w = dequantize_tensor(t.name, t.data, t.tensor_type, _torch_shape(t))
        kind = t.name.split(".")[-2]
        if permuted and kind in heads:
            w = unpermute_qk(w, heads[kind])
        params[ours].copy_(torch.from_numpy(w))


def _decimal(value: Any) -> float:
    """A float32 metadata value as the shortest decimal that rounds to it (1e-06, not
    9.99999997e-07): what the converter was given, and the same float32 in the model."""
    return float(str(np.float32(value)))


def _type_name(qtype: Any) -> str:
    return getattr(qtype, "name", str(qtype))


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    rest = len(items) - MAX_LISTED
    return shown + (f" (and {rest} more)" if rest > 0 else "")
