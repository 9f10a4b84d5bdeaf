"""Reading a Hugging Face checkpoint folder: safetensors weights, tokenizer, generation EOS ids.

`load_weights` copies `model.safetensors` (or the shards named by
`model.safetensors.index.json`) into a model whose `state_dict()` keys are Hugging Face's
Llama-family names. It checks every name and shape against the file headers before it touches
a weight, then loads tensor by tensor, so peak memory is the model plus one tensor and a failed
load leaves the model unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors import SafetensorError, safe_open
from tokenizers import Tokenizer

from exec.loading.fp8_weights import check_supported, dequantize, is_scale_name, scale_name
from shared.config.quant_config import QuantConfig

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILE = "tokenizer.json"
GENERATION_CONFIG_FILE = "generation_config.json"
# Tensors some checkpoints carry that no model needs (old Llama conversions saved rotary caches).
HARMLESS_SUFFIXES = (".rotary_emb.inv_freq",)
LM_HEAD = "lm_head.weight"
EMBEDDING = "model.embed_tokens.weight"
MAX_LISTED = 5


class CheckpointError(ValueError):
    """A checkpoint folder is missing a file, or its tensors do not fit the model."""


class _Entry(NamedTuple):
    """Where a checkpoint tensor lives, and its shape from the file header."""

    path: Path
    shape: tuple[int, ...]


class _Target(NamedTuple):
    """Every state_dict name of one model tensor (several when tied), and its shape.

    NOTE: no reference to the tensor itself, so a tensor replaced during loading (a cast or a
    move) is freed at once rather than when loading ends.
    """

    names: tuple[str, ...]
    shape: tuple[int, ...]


def load_weights(model: torch.nn.Module, folder: str | Path, *,
                 dtype: torch.dtype, device: str | torch.device,
                 quant: QuantConfig | None = None) -> None:
    """Load the safetensors checkpoint in `folder` into `model`, cast to `dtype` on `device`.

    Floating-point tensors are cast to `dtype`; every tensor ends up on `device`. A parameter
    already of that dtype and device is overwritten in place; any other (say, built on the
    meta device) is replaced by a new Parameter. Tied names (one tensor under two names, e.g.
    `lm_head.weight` and `model.embed_tokens.weight`) are loaded once, and a checkpoint's
    `lm_head.weight` is skipped when the model has no `lm_head.weight` of its own (it ties the
    embedding). `*.rotary_emb.inv_freq` tensors are ignored. Quantization scales
    (`*.weight_scale_inv`, `*.weight_scale`, `*.input_scale`, `*.k_scale`, ...) are not model
    tensors: a weight with a scale is dequantized as it is read (`exec.loading.fp8_weights`, with
    `quant`'s weight_block_size); `quant` other than fp8 is refused naming its quant_method.

    Raises CheckpointError, before any weight changes, when the folder has no safetensors
    files, the index names a missing shard or a tensor its shard lacks, the checkpoint has a
    tensor the model does not (named), a model tensor is missing (the first few named), or a
    shape differs (name, expected, got).
    """
    folder = Path(folder)
    try:
        check_supported(quant, str(folder))
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    entries = _checkpoint_entries(folder)
    targets = _targets(model)
    plan = _plan(entries, targets, folder)
    _check_shapes(plan, entries, targets)
    for path, pairs in _by_file(plan, entries, targets).items():
        _load_file(model, path, pairs, dtype=dtype, device=device, entries=entries,
                   block=None if quant is None else quant.weight_block_size)


def load_tokenizer(folder: str | Path) -> Tokenizer | None:
    """The folder's `tokenizer.json`, or None when it has none (the model takes token ids).

    Raises CheckpointError naming the file when it exists but cannot be parsed.
    """
    path = Path(folder) / TOKENIZER_FILE
    if not path.is_file():
        return None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception on a bad file
        raise CheckpointError(f"cannot read tokenizer {path}: {e}") from e


def load_generation_eos(folder: str | Path) -> tuple[int, ...]:
    """EOS token ids from `generation_config.json` (an int or a list); () when absent.

    Raises CheckpointError naming the file when it is not JSON or the ids are not integers.
    """
    path = Path(folder) / GENERATION_CONFIG_FILE
    if not path.is_file():
        return ()
    eos = _read_json(path).get("eos_token_id")
    ids = [] if eos is None else eos if isinstance(eos, list) else [eos]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise CheckpointError(f"{path}: eos_token_id must be an int or a list of ints, "
                              f"got {eos!r}")
    return tuple(ids)


def _checkpoint_entries(folder: Path) -> dict[str, _Entry]:
    """Checkpoint tensor name -> file and shape, from the index or the single file."""
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    if (folder / INDEX_FILE).is_file():
        return _indexed_entries(folder / INDEX_FILE)
    if (folder / SINGLE_FILE).is_file():
        return _file_entries(folder / SINGLE_FILE)
    found = sorted(p.name for p in folder.iterdir())
    raise CheckpointError(f"no {SINGLE_FILE} or {INDEX_FILE} in {folder} "
                          f"(found: {_listed(found) or 'nothing'})")


def _indexed_entries(index: Path) -> dict[str, _Entry]:
    """Entries of every tensor the index's `weight_map` names, checked against its shard."""
    weight_map = _read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index} has no weight_map")
    shards = sorted(set(weight_map.values()))
    _require_shards(index, shards)
    headers = {s: _file_entries(index.parent / s) for s in shards}
    absent = [f"{n!r} (in {s})" for n, s in weight_map.items() if n not in headers[s]]
    if absent:
        raise CheckpointError(f"{index} maps tensors to shards that lack them: "
                              f"{_listed(absent)}")
    return {name: headers[shard][name] for name, shard in weight_map.items()}


def _require_shards(index: Path, shards: list[str]) -> None:
    """Raise naming the shards the index lists that are not in its folder."""
    missing = [s for s in shards if not (index.parent / s).is_file()]
    if missing:
        raise CheckpointError(f"{index} names shards missing from {index.parent}: "
                              f"{_listed(missing)}")


def _file_entries(path: Path) -> dict[str, _Entry]:
    """Name -> entry for every tensor in one safetensors file (reads the header only)."""
    try:
        with safe_open(path, framework="pt") as f:
            names = f.keys()  # a safe_open handle is not iterable
            return {k: _Entry(path, tuple(f.get_slice(k).get_shape())) for k in names}
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"cannot read safetensors file {path}: {e}") from e


def _targets(model: torch.nn.Module) -> dict[str, _Target]:
    """First state_dict name of each distinct tensor -> all its (tied) names and its shape."""
    groups: dict[int, list[str]] = {}
    state = model.state_dict(keep_vars=True)
    for name, tensor in state.items():
        groups.setdefault(id(tensor), []).append(name)
    return {names[0]: _Target(tuple(names), tuple(state[names[0]].shape))
            for names in groups.values()}


def _plan(entries: dict[str, _Entry], targets: dict[str, _Target],
          folder: Path) -> dict[str, str]:
    """Model tensor (first name of its group) -> the checkpoint tensor to load into it."""
    owner = {name: first for first, target in targets.items() for name in target.names}
    plan: dict[str, str] = {}
    unknown = []
    for name in _wanted(entries, owner):
        if name not in owner:
            unknown.append(name)
        elif owner[name] not in plan or name == owner[name]:
            plan[owner[name]] = name
    missing = [first for first in targets if first not in plan]
    _raise_mismatch(unknown, missing, entries, folder)
    return plan


def _wanted(entries: dict[str, _Entry], owner: dict[str, str]) -> list[str]:
    """Checkpoint names, less harmless extras and an lm_head a tied-embedding model lacks."""
    tied_head = LM_HEAD not in owner and EMBEDDING in owner
    return [n for n in entries if not n.endswith(HARMLESS_SUFFIXES) and not is_scale_name(n)
            and not (tied_head and n == LM_HEAD)]


def _raise_mismatch(unknown: list[str], missing: list[str], entries: dict[str, _Entry],
                    folder: Path) -> None:
    """One error naming the tensors the model lacks and the ones the checkpoint lacks."""
    problems = []
    if unknown:
        named = [f"{n!r} (in {entries[n].path.name})" for n in unknown]
        problems.append(f"tensors the model does not have: {_listed(named)}")
    if missing:
        problems.append(f"model tensors missing from the checkpoint: "
                        f"{_listed([repr(n) for n in missing])}")
    if problems:
        raise CheckpointError(f"checkpoint {folder} does not fit the model; "
                              + "; ".join(problems))


def _check_shapes(plan: dict[str, str], entries: dict[str, _Entry],
                  targets: dict[str, _Target]) -> None:
    """Raise naming the first checkpoint tensor whose shape differs from the model's."""
    for first, name in plan.items():
        expected, got = targets[first].shape, entries[name].shape
        if expected != got:
            raise CheckpointError(
                f"tensor {name!r} in {entries[name].path}: model expects shape "
                f"{expected}, checkpoint has {got}")


def _by_file(plan: dict[str, str], entries: dict[str, _Entry],
             targets: dict[str, _Target]) -> dict[Path, list[tuple[_Target, str]]]:
    """(model tensor, checkpoint tensor name) pairs grouped by the file to read them from."""
    files: dict[Path, list[tuple[_Target, str]]] = {}
    for first, name in plan.items():
        files.setdefault(entries[name].path, []).append((targets[first], name))
    return files


@torch.no_grad()
def _load_file(model: torch.nn.Module, path: Path, pairs: Iterable[tuple[_Target, str]], *,
               dtype: torch.dtype, device: str | torch.device, entries: dict[str, _Entry],
               block: tuple[int, int] | None) -> None:
    """Read each pair's tensor from `path`, one at a time (dequantized when it has a scale
    among `entries`), into the model."""
    with safe_open(path, framework="pt") as f:
        for target, name in pairs:
            tensor = f.get_tensor(name)
            scale = scale_name(name, entries)
            if scale is not None:
                tensor = _dequantized(tensor, entries[scale], scale, block, name)
            if tensor.is_floating_point():
                tensor = tensor.to(dtype)
            _assign(model, target, tensor.to(device))


def _dequantized(weight: torch.Tensor, entry: _Entry, scale: str,
                 block: tuple[int, int] | None, name: str) -> torch.Tensor:
    """`weight` times its scale tensor `scale` (read from its own file) -> float32."""
    with safe_open(entry.path, framework="pt") as f:
        s = f.get_tensor(scale)
    try:
        return dequantize(weight, s, block, name)
    except ValueError as e:
        raise CheckpointError(f"{entry.path}: {e}") from None


def _assign(model: torch.nn.Module, target: _Target, tensor: torch.Tensor) -> None:
    """Copy in place when dtype and device match; otherwise rebind every tied name."""
    current = getattr(*_module_and_leaf(model, target.names[0]))
    if current.dtype == tensor.dtype and current.device == tensor.device:
        current.copy_(tensor)
        return
    if isinstance(current, torch.nn.Parameter):
        tensor = torch.nn.Parameter(tensor, requires_grad=current.requires_grad)
    for name in target.names:
        setattr(*_module_and_leaf(model, name), tensor)


def _module_and_leaf(model: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    """`model.layers.0.mlp.up_proj.weight` -> (the up_proj module, "weight")."""
    module_name, _, leaf = name.rpartition(".")
    return model.get_submodule(module_name), leaf


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`; CheckpointError naming the file when it is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"cannot read {path}: {e}") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    return data


def _listed(items: list[str]) -> str:
    """The first few items, comma-separated, with a count of the rest."""
    shown = ", ".join(items[:MAX_LISTED])
    rest = len(items) - MAX_LISTED
    return shown + (f" (and {rest} more)" if rest > 0 else "")
