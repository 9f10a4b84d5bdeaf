"""exec/loading/loader.py: safetensors checkpoints (single and sharded), tokenizer, generation EOS ids.

Checkpoints are tiny random-weight Hugging Face models written by transformers'
`save_pretrained`; the load target is a second Hugging Face model with other random weights
(its state_dict names are the contract the real model follows), or a stand-in module.
"""

import json
import shutil
import weakref

import pytest
import safetensors.torch
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

import exec.loading.loader
from exec.loading.loader import CheckpointError, load_generation_eos, load_tokenizer, load_weights

SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
CONFIGS = {
    "llama": lambda **kw: transformers.LlamaConfig(**SIZES, **kw),
    "qwen2": lambda **kw: transformers.Qwen2Config(**SIZES, **kw),
    "qwen3": lambda **kw: transformers.Qwen3Config(**SIZES, head_dim=32, **kw),
}
SHARD = "50KB"
LAYOUTS = ("single", "sharded")


def hf_model(arch, seed, **kw):
    """A tiny random-weight Hugging Face causal LM."""
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(CONFIGS[arch](**kw))


def save(model, folder, layout):
    model.save_pretrained(folder, max_shard_size=SHARD if layout == "sharded" else "1GB")
    return folder


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """(arch, layout) -> (source model, its checkpoint folder)."""
    out = {}
    for arch in CONFIGS:
        source = hf_model(arch, seed=0)
        for layout in LAYOUTS:
            out[arch, layout] = source, save(source, tmp_path_factory.mktemp(arch), layout)
    return out


@pytest.fixture
def llama_copy(checkpoints, tmp_path):
    """A writable copy of the single-file Llama checkpoint, and its source model."""
    source, folder = checkpoints["llama", "single"]
    return source, shutil.copytree(folder, tmp_path / "ckpt")


def assert_same_weights(model, source, dtype):
    expected = source.state_dict()
    loaded = model.state_dict()
    assert loaded.keys() == expected.keys()
    for name, tensor in expected.items():
        assert loaded[name].dtype == dtype, name
        assert torch.equal(loaded[name], tensor.to(dtype)), name


def rewrite(folder, edit):
    """Apply `edit` to the tensors of folder/model.safetensors and write them back."""
    path = folder / "model.safetensors"
    tensors = safetensors.torch.load_file(path)
    edit(tensors)
    safetensors.torch.save_file(tensors, path, metadata={"format": "pt"})


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("arch", list(CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_load_reproduces_the_checkpoint_weights(checkpoints, arch, layout, dtype):
    """A model with other random weights ends up with the checkpoint's, cast to dtype."""
    source, folder = checkpoints[arch, layout]
    target = hf_model(arch, seed=1)
    load_weights(target, folder, dtype=dtype, device="cpu")
    assert_same_weights(target, source, dtype)


def test_sharded_fixture_really_is_sharded(checkpoints):
    """The sharded checkpoint has an index and several shard files (so the sharded path runs)."""
    _, folder = checkpoints["llama", "sharded"]
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    assert not (folder / "model.safetensors").exists()


def test_matching_dtype_and_device_copy_in_place(checkpoints):
    """Parameters already of the right dtype and device keep their identity (copied in place)."""
    _, folder = checkpoints["llama", "single"]
    target = hf_model("llama", seed=1)
    before = dict(target.named_parameters())
    load_weights(target, folder, dtype=torch.float32, device=torch.device("cpu"))
    assert all(p is before[name] for name, p in target.named_parameters())


def test_cast_frees_each_old_tensor_as_soon_as_it_is_replaced(checkpoints, monkeypatch):
    """Loading is tensor by tensor: after each replacement, only not-yet-loaded originals live."""
    _, folder = checkpoints["llama", "sharded"]
    target = hf_model("llama", seed=1)
    originals = [weakref.ref(p) for p in target.parameters()]
    alive_counts = []
    real_assign = exec.loading.loader._assign

    def counting_assign(*args):
        real_assign(*args)
        alive_counts.append(sum(ref() is not None for ref in originals))

    monkeypatch.setattr(exec.loading.loader, "_assign", counting_assign)
    load_weights(target, folder, dtype=torch.bfloat16, device="cpu")
    assert alive_counts == [len(originals) - i for i in range(1, len(originals) + 1)]


def test_meta_device_model_is_materialised(checkpoints):
    """A model built on the meta device gets real tensors on the requested device."""
    source, folder = checkpoints["qwen2", "sharded"]
    with torch.device("meta"):
        target = hf_model("qwen2", seed=1)
    load_weights(target, folder, dtype=torch.float16, device="cpu")
    assert_same_weights(target, source, torch.float16)
    assert all(isinstance(p, torch.nn.Parameter) for p in target.parameters())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tied_embeddings_load_and_stay_tied(tmp_path, dtype):
    """SmolLM2-style tied embeddings: the checkpoint has no lm_head and the tie survives a cast."""
    source = hf_model("llama", seed=0, tie_word_embeddings=True)
    folder = save(source, tmp_path, "single")
    assert "lm_head.weight" not in safetensors.torch.load_file(folder / "model.safetensors")
    target = hf_model("llama", seed=1, tie_word_embeddings=True)
    load_weights(target, folder, dtype=dtype, device="cpu")
    assert_same_weights(target, source, dtype)
    assert target.lm_head.weight is target.model.embed_tokens.weight


def test_tied_model_takes_the_embedding_from_an_untied_checkpoint(checkpoints):
    """A tied model loads the embedding and skips a checkpoint's separate lm_head.weight."""
    source, folder = checkpoints["llama", "single"]
    target = hf_model("llama", seed=1, tie_word_embeddings=True)
    load_weights(target, folder, dtype=torch.float32, device="cpu")
    embedding = source.model.embed_tokens.weight
    assert torch.equal(target.lm_head.weight, embedding)


class StandIn(torch.nn.Module):
    """A module whose state_dict has exactly the given names and shapes (zeros)."""

    def __init__(self, shapes):
        super().__init__()
        for name, shape in shapes.items():
            *path, leaf = name.split(".")
            module = self
            for part in path:
                if part not in module._modules:
                    module.add_module(part, torch.nn.Module())
                module = module._modules[part]
            module.register_parameter(leaf, torch.nn.Parameter(torch.zeros(shape)))


def test_model_without_lm_head_skips_the_checkpoint_lm_head(checkpoints):
    """A model with no lm_head.weight of its own (it ties the embedding) ignores the checkpoint's."""
    source, folder = checkpoints["qwen3", "sharded"]
    shapes = {n: t.shape for n, t in source.state_dict().items() if n != "lm_head.weight"}
    target = StandIn(shapes)
    load_weights(target, folder, dtype=torch.float32, device="cpu")
    for name, tensor in target.state_dict().items():
        assert torch.equal(tensor, source.state_dict()[name]), name


def test_rotary_inv_freq_in_the_checkpoint_is_ignored(llama_copy):
    """Old conversions' `*.rotary_emb.inv_freq` tensors load without complaint."""
    source, folder = llama_copy
    rewrite(folder, lambda t: t.update({"model.layers.0.self_attn.rotary_emb.inv_freq":
                                        torch.ones(8)}))
    target = hf_model("llama", seed=1)
    load_weights(target, folder, dtype=torch.float32, device="cpu")
    assert_same_weights(target, source, torch.float32)


def test_folder_without_safetensors_is_refused(tmp_path):
    """A folder with no safetensors files raises naming what it did find."""
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"no model\.safetensors.*pytorch_model\.bin"):
        load_weights(hf_model("llama", 1), tmp_path, dtype=torch.float32, device="cpu")


def test_missing_folder_is_refused(tmp_path):
    """A folder that does not exist raises naming it."""
    with pytest.raises(CheckpointError, match="does not exist"):
        load_weights(hf_model("llama", 1), tmp_path / "nope", dtype=torch.float32, device="cpu")


def test_missing_shard_is_named(checkpoints, tmp_path):
    """Deleting a shard the index points to raises naming that shard."""
    folder = shutil.copytree(checkpoints["llama", "sharded"][1], tmp_path / "ckpt")
    (folder / "model-00002-of-00010.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"missing.*model-00002-of-00010\.safetensors"):
        load_weights(hf_model("llama", 1), folder, dtype=torch.float32, device="cpu")


def test_index_naming_a_tensor_its_shard_lacks_is_refused(checkpoints, tmp_path):
    """An index that maps a tensor to the wrong shard raises naming the tensor."""
    folder = shutil.copytree(checkpoints["llama", "sharded"][1], tmp_path / "ckpt")
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shards = sorted(set(index["weight_map"].values()))
    name = next(n for n, s in index["weight_map"].items() if s == shards[0])
    index["weight_map"][name] = shards[1]
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=rf"lack them.*'{name}'"):
        load_weights(hf_model("llama", 1), folder, dtype=torch.float32, device="cpu")


def test_unreadable_index_and_safetensors_are_named(llama_copy, checkpoints, tmp_path):
    """A corrupt index or safetensors file raises naming the file."""
    _, folder = llama_copy
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        load_weights(hf_model("llama", 1), folder, dtype=torch.float32, device="cpu")
    sharded = shutil.copytree(checkpoints["llama", "sharded"][1], tmp_path / "sharded")
    (sharded / "model.safetensors.index.json").write_text("{")
    with pytest.raises(CheckpointError, match=r"model\.safetensors\.index\.json"):
        load_weights(hf_model("llama", 1), sharded, dtype=torch.float32, device="cpu")


def test_renamed_tensor_is_named_as_unknown_and_missing(llama_copy):
    """A tensor under a name the model lacks raises naming it (and the name now missing)."""
    _, folder = llama_copy
    old, new = "model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.upper_proj.weight"
    rewrite(folder, lambda t: t.update({new: t.pop(old)}))
    with pytest.raises(CheckpointError, match=rf"does not have: '{new}'.*missing.*'{old}'"):
        load_weights(hf_model("llama", 1), folder, dtype=torch.float32, device="cpu")


def test_wrong_shape_is_named_with_both_shapes(llama_copy):
    """A tensor of the wrong shape raises with its name, the expected and the found shape."""
    _, folder = llama_copy
    name = "model.layers.0.self_attn.k_proj.weight"
    rewrite(folder, lambda t: t.update({name: torch.zeros(16, 64)}))
    with pytest.raises(CheckpointError, match=rf"'{name}'.*expects shape \(32, 64\).*has \(16, 64\)"):
        load_weights(hf_model("llama", 1), folder, dtype=torch.float32, device="cpu")


def test_missing_tensors_are_named_first_few_then_counted(llama_copy):
    """Missing tensors are named (the first few, then how many more)."""
    _, folder = llama_copy
    gone = [f"model.layers.{i}.mlp.{p}_proj.weight" for i in (0, 1) for p in ("gate", "up", "down")]
    rewrite(folder, lambda t: [t.pop(n) for n in gone])
    with pytest.raises(CheckpointError, match=rf"missing.*'{gone[0]}'.*\(and 1 more\)"):
        load_weights(hf_model("llama", 1), folder, dtype=torch.float32, device="cpu")


def test_failed_load_leaves_the_model_unchanged(llama_copy):
    """Names and shapes are checked before any weight is written."""
    _, folder = llama_copy
    rewrite(folder, lambda t: t.update({"model.norm.weight": torch.zeros(3)}))
    target = hf_model("llama", seed=1)
    before = {n: t.clone() for n, t in target.state_dict().items()}
    with pytest.raises(CheckpointError):
        load_weights(target, folder, dtype=torch.float32, device="cpu")
    assert all(torch.equal(t, before[n]) for n, t in target.state_dict().items())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_load_onto_cuda(checkpoints):
    """A CPU-built model loads onto the GPU, cast, with the checkpoint's weights."""
    source, folder = checkpoints["qwen3", "sharded"]
    target = hf_model("qwen3", seed=1)
    load_weights(target, folder, dtype=torch.bfloat16, device="cuda")
    assert all(p.device.type == "cuda" for p in target.parameters())
    assert_same_weights(target.cpu(), source, torch.bfloat16)


def test_folder_without_tokenizer_json_has_no_tokenizer(tmp_path):
    """No tokenizer.json: None (the model takes token-id prompts)."""
    assert load_tokenizer(tmp_path) is None


def test_tokenizer_json_loads_and_encodes(tmp_path):
    """A tokenizer.json written by `tokenizers` loads and encodes to its ids."""
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    assert load_tokenizer(tmp_path).encode("hello world again").ids == [1, 2, 0]


def test_corrupt_tokenizer_json_is_named(tmp_path):
    """An unparsable tokenizer.json raises naming the file."""
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"tokenizer\.json"):
        load_tokenizer(tmp_path)


@pytest.mark.parametrize(("content", "expected"), [
    ({"eos_token_id": 2}, (2,)),
    ({"eos_token_id": [128001, 128008, 128009]}, (128001, 128008, 128009)),
    ({"eos_token_id": None}, ()),
    ({"bos_token_id": 1}, ()),
])
def test_generation_eos_reads_int_or_list(tmp_path, content, expected):
    """generation_config.json's eos_token_id, an int or a list, becomes a tuple of ids."""
    (tmp_path / "generation_config.json").write_text(json.dumps(content))
    assert load_generation_eos(tmp_path) == expected


def test_generation_eos_without_file_is_empty(tmp_path):
    """No generation_config.json: no extra EOS ids."""
    assert load_generation_eos(tmp_path) == ()


def test_generation_eos_from_save_pretrained(checkpoints):
    """The generation_config.json transformers writes is read (Llama's default EOS is 2)."""
    assert load_generation_eos(checkpoints["llama", "single"][1]) == (2,)


@pytest.mark.parametrize("text", ['{"eos_token_id": "2"}', "[1, 2]", "{"])
def test_bad_generation_config_is_named(tmp_path, text):
    """A generation_config.json that is not JSON, or has non-integer EOS ids, raises naming it."""
    (tmp_path / "generation_config.json").write_text(text)
    with pytest.raises(CheckpointError, match=r"generation_config\.json"):
        load_generation_eos(tmp_path)
