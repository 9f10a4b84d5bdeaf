"""`batchtwin`: bad input never shows a traceback. Usage errors exit 2 naming the flag (argparse);
bad files, configs and devices exit 1 with one line `batchtwin <command>: <what is wrong>` on
stderr; `--debug` shows the traceback instead; a closed stdout pipe exits quietly."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.main import main

SIM = ["--model", "smollm2-135m", "--num-requests", "4", "--rate", "50", "--prompt-len", "16",
       "--output-len", "4", "--no-progress"]
TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 16,
               "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
               "num_key_value_heads": 1, "rms_norm_eps": 1e-5, "max_position_embeddings": 128,
               "eos_token_id": 0}


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stderr) of `batchtwin ARGV` run in-process."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def config_folder(folder: Path, text: str) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(text)
    return folder


def tiny_gguf(path: Path) -> Path:
    """A valid one-layer Llama GGUF (all-ones F32 weights, no vocabulary)."""
    import gguf
    import numpy as np
    import torch

    from exec.loading.gguf_loader import GLOBAL_TENSORS, LAYER_TENSORS
    from exec.models import runnable_config
    from exec.models.llama import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(runnable_config(TINY_CONFIG))
    names = {v: k for k, v in GLOBAL_TENSORS.items()}
    names.update({f"model.layers.0.{v}": f"blk.0.{k}" for k, v in LAYER_TENSORS.items()})
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(128)
    w.add_embedding_length(16)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(64)
    for name, p in model.named_parameters():
        w.add_tensor(names[name], np.ones(tuple(p.shape), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    """The files the tables refer to as {name}: good and broken models, workloads, outputs."""
    from experiments.tiny_checkpoint import TinyModelConfig, write_tiny_checkpoint

    root = tmp_path_factory.mktemp("cli-errors")
    tiny = write_tiny_checkpoint(root / "tiny", TinyModelConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512))
    (root / "no-config").mkdir()
    gguf_bytes = tiny_gguf(root / "whole.gguf").read_bytes()
    (root / "cut.gguf").write_bytes(gguf_bytes[: len(gguf_bytes) // 2])
    (root / "bad-workload.jsonl").write_text("this is not json\n")
    (root / "a-file").write_text("keep me\n")
    (root / "results").mkdir()
    (root / "results" / "old.txt").write_text("earlier results\n")
    assert main(["simulate", *SIM, "--out", str(root / "run"), "--save-trace"]) == 0
    return {
        "root": str(root), "tiny": str(tiny), "no_config": str(root / "no-config"),
        "zero_heads": str(config_folder(root / "zero-heads",
                                        json.dumps({**TINY_CONFIG, "num_attention_heads": 0}))),
        "negative_vocab": str(config_folder(root / "negative-vocab",
                                            json.dumps({**TINY_CONFIG, "vocab_size": -5}))),
        "malformed": str(config_folder(root / "malformed", "{not json")),
        "truncated": str(root / "cut.gguf"), "bad_workload": str(root / "bad-workload.jsonl"),
        "file": str(root / "a-file"), "nonempty": str(root / "results"),
        "trace": str(root / "run" / "trace.jsonl"),
    }


def fill(argv: list[str], paths: dict[str, str]) -> list[str]:
    return [a.format(**paths) for a in argv]


def row_ids(table) -> list[str]:
    """Test ids: the command and its last two arguments (`simulate --seed -1`)."""
    argvs = [row.values[0] if hasattr(row, "values") else row[0] for row in table]
    return [" ".join([argv[0], *argv[-2:]]).replace("{", "").replace("}", "") for argv in argvs]


USAGE_ERRORS = [
    (["generate", "hi", "--model", "{tiny}", "--seed", "1180591620717411303424"], "--seed"),
    (["generate", "hi", "--model", "{tiny}", "--max-total-tokens", "0"], "--max-total-tokens"),
    (["prefix-reuse", "--groups", "0"], "--groups"),
    (["prefix-reuse", "--kv-tokens", "0"], "--kv-tokens"),
    (["prefix-reuse", "--page-size", "0"], "--page-size"),
    (["prefix-reuse", "--concurrency", "0"], "--concurrency"),
    (["prefix-reuse", "--system-len", "-1"], "--system-len"),
    (["simulate", *SIM, "--prompt-len", "0"], "--prompt-len"),
    (["simulate", *SIM, "--prompt-len", "-3"], "--prompt-len"),
    (["simulate", *SIM, "--output-len", "0"], "--output-len"),
    (["simulate", *SIM, "--seed", "-1"], "--seed"),
    (["simulate", *SIM, "--save-trace"], "--save-trace"),
    (["simulate", *SIM, "--rate", "-5"], "--rate"),
    (["simulate", *SIM, "--rate", "nan"], "--rate"),
    (["simulate", *SIM, "--num-requests", "-3"], "--num-requests"),
    (["simulate", *SIM, "--num-requests", "0"], "--num-requests"),
    (["plan", "--num-requests", "-3"], "--num-requests"),
    (["plan", "--rate", "-5"], "--rate"),
    (["plan", "--num-requests", "5"], "--num-requests"),
    (["plan", "--seeds", "0"], "--seeds"),
    (["plan", "--target-rate", "-4"], "--target-rate"),
    (["plan", "--rate-tolerance", "1.5"], "--rate-tolerance"),
    (["replay", "{trace}", "--no-plot", "--hardware", "h100", "--tp", "0"], "--tp"),
    (["replay", "{trace}", "--no-plot", "--tp", "2"], "--tp"),
    (["fidelity", "--model", "{tiny}", "--out", "{root}/fid", "--max-total-tokens", "5"],
     "--max-total-tokens"),
]


@pytest.mark.parametrize(("argv", "flag"), USAGE_ERRORS, ids=row_ids(USAGE_ERRORS))
def test_a_bad_flag_value_is_a_usage_error_naming_the_flag(argv, flag, paths, capsys):
    """An out-of-range flag value exits 2 with argparse's error line naming the flag."""
    code, err = run_cli(fill(argv, paths), capsys)
    last = err.strip().splitlines()[-1] if err.strip() else ""
    assert code == 2 and "error:" in last and flag in last
    assert "Traceback" not in err


try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ModuleNotFoundError:
    HAS_CUDA = False

ONE_LINE_ERRORS = [
    (["generate", "hi", "--model", "{no_config}"], ["{no_config}", "config.json"]),
    (["generate", "hi", "--model", "{zero_heads}"], ["{zero_heads}", "num_attention_heads"]),
    (["generate", "hi", "--model", "{negative_vocab}"], ["{negative_vocab}", "vocab_size"]),
    (["generate", "hi", "--model", "{malformed}"], ["{malformed}/config.json", "JSON"]),
    (["generate", "hi", "--model", "{truncated}"], ["{truncated}", "truncated"]),
    (["generate", "hi", "--model", "{tiny}", "--device", "bogus"], ["'bogus'"]),
    pytest.param(["generate", "hi", "--model", "{tiny}", "--device", "cuda"], ["'cuda'", "CUDA"],
                 marks=pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")),
    (["calibrate", "--model", "{tiny}", "--out", "{root}/cal", "--device", "bogus"], ["'bogus'"]),
    (["simulate", *SIM, "--workload-file", "{bad_workload}"], ["{bad_workload}"]),
    (["simulate", *SIM, "--out", "{file}"], ["--out", "{file}"]),
    (["simulate", *SIM, "--out", "{nonempty}"], ["{nonempty}", "--overwrite"]),
    (["replay", "{trace}", "--plot", "{root}/no-such-folder/replay.png"],
     ["{root}/no-such-folder"]),
]


@pytest.mark.parametrize(("argv", "expected"), ONE_LINE_ERRORS, ids=row_ids(ONE_LINE_ERRORS))
def test_bad_input_is_one_line_naming_the_problem(argv, expected, paths, capsys):
    """A bad file, config, device or output path exits 1 with one line naming it, no traceback."""
    code, err = run_cli(fill(argv, paths), capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith(f"batchtwin {argv[0]}: ")
    for part in fill(expected, paths):
        assert part in lines[0]


def test_overwrite_lets_simulate_replace_its_own_output(tmp_path, capsys):
    """`--out` refuses a folder that holds files; `--overwrite` replaces the results in it."""
    out = str(tmp_path / "run")
    assert main(["simulate", *SIM, "--out", out, "--save-trace"]) == 0
    assert main(["simulate", *SIM, "--out", out]) == 1
    assert main(["simulate", *SIM, "--out", out, "--overwrite"]) == 0
    assert "trace.jsonl" not in os.listdir(out) and "summary.json" in os.listdir(out)


def test_the_debug_flag_shows_the_traceback(capsys):
    """`batchtwin --debug ...` lets the error propagate (its traceback) instead of one line."""
    with pytest.raises(ValueError, match="known keys"):
        main(["--debug", "simulate", *SIM, "--model", "gpt-9"])


def test_an_unexpected_error_keeps_its_traceback(monkeypatch):
    """An error that is no bad input (a bug) propagates: it is not turned into one line."""
    simulate_module = importlib.import_module("sim.run.simulate")

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(simulate_module, "simulate", broken)
    with pytest.raises(ZeroDivisionError):
        main(["simulate", *SIM])


class BrokenPipe:
    """A stdout whose reader has gone: every write raises BrokenPipeError."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_broken_stdout_exits_quietly(capsys):
    """`simulate | head`: a reader that goes away ends the run quietly, exit 1, no traceback."""
    saved = sys.stdout
    sys.stdout = BrokenPipe()
    try:
        code = main(["simulate", *SIM])
    finally:
        sys.stdout = saved
    assert code == 1 and capsys.readouterr().err == ""


def test_a_closed_stdout_pipe_exits_quietly():
    """The process behind `batchtwin simulate | head` prints nothing on stderr when the pipe's
    reader has closed (the Python docs' SIGPIPE recipe: stdout goes to devnull)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "experiments.main", "simulate", *SIM],
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)
    assert done.returncode == 1 and done.stderr == ""


def test_generate_threads_sets_the_torch_thread_count(paths, monkeypatch, capsys):
    """`generate --threads N` runs torch with N intra-op threads."""
    import torch

    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    main(["generate", "hi", "--model", paths["tiny"], "--threads", "1", "--max-new-tokens", "1"])
    assert calls == [1]
