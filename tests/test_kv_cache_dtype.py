"""The fp8 KV cache end to end (`Engine(kv_cache_dtype=...)`, `--kv-cache-dtype`): output
close to the model-dtype cache, twice the tokens per byte, bad names refused, no leak."""

import argparse

import pytest
import torch

from exec.engine.engine import Engine
from exec.memory.kv_pool import kv_pool_nbytes
from exec.models import runnable_config
from exec.runner import kv_capacity
from exec.runner.kv_capacity import default_kv_capacity
from experiments import generate_cmd
from experiments.tiny_checkpoint import write_tiny_checkpoint

PROMPTS = [[5, 6, 7, 8, 9], [100, 101, 102]]
STEPS = 8
GREEDY = {"max_new_tokens": STEPS, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-llama-kv"))


def _greedy_logits(folder, kv_cache_dtype: str) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Token ids and per-step logits [STEPS, V] of each prompt, with the run's leak check."""
    engine = Engine(folder, max_total_tokens=256, kv_cache_dtype=kv_cache_dtype)
    by_rid: dict[str, list[torch.Tensor]] = {}
    forward = engine.runner.forward

    def recording(fb):
        out = forward(fb)
        for i, rid in enumerate(fb.rids):
            if engine.trace.requests[rid].finish_reason is None:
                by_rid.setdefault(rid, []).append(out.logits[i].float().clone())
        return out

    engine.runner.forward = recording
    outs = engine.generate(PROMPTS, GREEDY)
    engine.scheduler.mem.check_idle()
    return [o.token_ids for o in outs], [torch.stack(by_rid[o.rid]) for o in outs]


# Max |logit diff| over the logit range (max - min) of the auto cache's; measured on the
# tiny Llama: e4m3 (3 mantissa bits) 1.9%, e5m2 (2 bits) 3.9%, bf16 0.1%.
TOLERANCE = {"fp8_e4m3": 0.03, "fp8_e5m2": 0.06, "bf16": 0.005}


@pytest.mark.parametrize("name", sorted(TOLERANCE))
def test_fp8_cache_greedy_run_stays_close_to_the_model_dtype_cache(folder, name):
    """8 greedy steps: up to the first differing token, logits within TOLERANCE of the auto
    cache's, and a token differs only where the auto cache's top two were within twice it
    (a near tie: the random tiny model's top-1 often leads by ~0.01)."""
    ref_ids, ref_logits = _greedy_logits(folder, "auto")
    ids, logits = _greedy_logits(folder, name)
    for want, got, want_l, got_l in zip(ref_ids, ids, ref_logits, logits, strict=True):
        same = next((i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a != b), STEPS)
        tol = TOLERANCE[name] * (want_l.max() - want_l.min()).item()
        assert (got_l[: same + 1] - want_l[: same + 1]).abs().max().item() <= tol
        if same < STEPS:
            top2 = want_l[same].topk(2).values
            assert (top2[0] - top2[1]).item() <= 2 * tol


def test_fp8_cache_holds_twice_the_tokens_of_bf16_in_the_same_memory(folder, monkeypatch):
    """Bytes per token halve, so the default capacity from the same free memory doubles."""
    config = runnable_config(folder)
    monkeypatch.setattr(kv_capacity, "_free_bytes", lambda device: float(1 << 28))
    bf16 = default_kv_capacity(config, "cpu", "float32", "bf16")
    fp8 = default_kv_capacity(config, "cpu", "float32", "fp8_e4m3")
    assert fp8 == 2 * bf16
    assert default_kv_capacity(config, "cpu", "bfloat16", "auto") == bf16
    assert kv_pool_nbytes(config, 4096, 16, torch.float8_e4m3fn) * 2 == \
        kv_pool_nbytes(config, 4096, 16, torch.bfloat16)


@pytest.mark.parametrize("bad", ["fp8", "float8", "", None, 8])
def test_unknown_kv_cache_dtype_is_refused_naming_the_field(folder, bad):
    """Engine refuses an unknown kv_cache_dtype before loading, naming kv_cache_dtype."""
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        Engine(folder, max_total_tokens=256, kv_cache_dtype=bad)


def test_generate_command_takes_sglangs_kv_cache_dtype_flag():
    """`batchtwin generate --kv-cache-dtype fp8_e4m3` parses; default auto; others refused."""
    p = argparse.ArgumentParser()
    generate_cmd.configure(p)
    assert p.parse_args(["hi"]).kv_cache_dtype == "auto"
    assert p.parse_args(["hi", "--kv-cache-dtype", "fp8_e4m3"]).kv_cache_dtype == "fp8_e4m3"
    with pytest.raises(SystemExit):
        p.parse_args(["hi", "--kv-cache-dtype", "int4"])


def _record_kv_dtype(engine: Engine, out_path: str) -> None:
    """Rank 0's job: a short run, its leak check, and the pool's storage dtype."""
    engine.generate(PROMPTS, GREEDY)
    engine.scheduler.mem.check_idle()
    with open(out_path, "w") as f:
        f.write(str(engine.runner.kv_pool.k.dtype))


def test_tensor_parallel_ranks_store_the_fp8_cache_too(folder, tmp_path):
    """kv_cache_dtype reaches the TP runner (rank 0's and, broadcast, the followers')."""
    from exec.engine.tp_worker import TPJob, launch

    out = tmp_path / "dtype"
    launch(2, TPJob(str(folder), _record_kv_dtype, (str(out),),
                    {"max_total_tokens": 256, "kv_cache_dtype": "fp8_e4m3"}))
    assert out.read_text() == "torch.float8_e4m3fn"
