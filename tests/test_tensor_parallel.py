"""Tensor parallelism (`--tp`, `exec.engine.tp_worker`): two gloo ranks run the tiny Llama as one
rank does, and a tp_size the model cannot be split by is refused before anything loads."""

from __future__ import annotations

import pickle

import pytest
import torch

from exec.distributed.tp_group import TPGroup
from exec.distributed.tp_launch import TPStartError
from exec.engine.engine import Engine
from exec.engine.tp_worker import TPJob, launch
from exec.loading.model_files import check_tp_model
from exec.models.tp_shard import shard_model
from experiments.main import main
from tests.engine_checks import assert_idle_and_leak_free

PREFIX = list(range(1, 13))
FIRST = [PREFIX]  # its KV stays cached: the second call's prompts reuse its prefix
THEN = [[*PREFIX, 20, 21], [*PREFIX[:8], 30], [40, 41, 42]]
PARAMS = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}


def _generate_and_record(engine: Engine, out_path: str) -> None:
    """Rank 0's job (and the one-rank run's): both calls, then what the test compares."""
    outs = engine.generate(FIRST, PARAMS) + engine.generate(THEN, PARAMS)
    assert_idle_and_leak_free(engine)
    record = {"tokens": [o.token_ids for o in outs],
              "cached": [o.meta["cached_tokens"] for o in outs],
              "steps": [s.to_dict() | {"start_time": 0, "duration": 0} for s in engine.trace.steps],
              "kv_heads": engine.runner.kv_pool.k.shape[2]}
    with open(out_path, "wb") as f:
        pickle.dump(record, f)


def _load(path) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


def test_two_ranks_generate_the_tokens_and_steps_of_one_rank(tiny_checkpoint, tmp_path):
    """Greedy tokens and the step trace (positions, slots, sampled ids, ...) of TP=2 on two
    gloo ranks equal TP=1's, with a shared prefix reused; each rank caches one of 2 KV heads."""
    folder, _ = tiny_checkpoint("llama")
    _generate_and_record(Engine(folder, max_total_tokens=512), str(tmp_path / "tp1"))
    launch(2, TPJob(str(folder), _generate_and_record, (str(tmp_path / "tp2"),),
                    {"max_total_tokens": 512}))
    one, two = _load(tmp_path / "tp1"), _load(tmp_path / "tp2")
    assert two["tokens"] == one["tokens"]
    assert two["steps"] == one["steps"]
    assert one["cached"][2] > 0 and two["cached"] == one["cached"]
    assert (one["kv_heads"], two["kv_heads"]) == (2, 1)


def test_a_tp_size_that_does_not_divide_the_heads_is_refused_before_loading(tiny_checkpoint, monkeypatch):
    """tp_size 3 (4 heads) raises a ValueError naming tp_size and the heads, before any
    weight is loaded or any rank started."""
    folder, _ = tiny_checkpoint("llama")
    started = lambda *a, **k: pytest.fail("started or loaded before the check")  # noqa: E731
    monkeypatch.setattr("exec.engine.tp_worker.spawn", started)
    monkeypatch.setattr("exec.engine.engine.open_model", started)
    message = r"tp_size \(--tp\) 3 does not divide num_attention_heads \(4\)"
    with pytest.raises(ValueError, match=message):
        launch(3, TPJob(str(folder), _generate_and_record))
    with pytest.raises(ValueError, match=message):
        Engine(folder, tp_group=TPGroup(0, 3))
    with pytest.raises(ValueError, match=r"tp_size \(--tp\) must be a positive integer"):
        check_tp_model(folder, 0)


def test_a_torchrun_world_of_another_size_is_refused_before_joining(tiny_checkpoint, monkeypatch):
    """torchrun's WORLD_SIZE 3 with tp_size 2: a ValueError naming both, nothing joined."""
    folder, _ = tiny_checkpoint("llama")
    for name, value in {"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("exec.engine.tp_worker.init_torchrun", lambda *a: pytest.fail("joined"))
    with pytest.raises(ValueError, match=r"tp_size \(--tp\) 2, but torchrun started 3 ranks"):
        launch(2, TPJob(str(folder), _generate_and_record))


def _fail(engine: Engine) -> None:
    raise ValueError("rank 0's job broke")


def test_an_error_on_rank_0_stops_the_followers_and_reaches_the_caller(tiny_checkpoint):
    """rank 0's job raising still sends the stop message: every rank exits, and the caller
    gets one TPStartError naming the rank and carrying its error, whichever process ends
    first (a follower may die in gloo's teardown before rank 0's exception is reported)."""
    folder, _ = tiny_checkpoint("llama")
    with pytest.raises(TPStartError, match="rank 0: ValueError: rank 0's job broke"):
        launch(2, TPJob(str(folder), _fail, (), {"max_total_tokens": 64}))


def test_the_cli_refuses_a_bad_tp_in_one_line(tiny_checkpoint, capsys):
    """`batchtwin generate --tp 3` on a 4-head model: exit 1, one line naming tp_size."""
    folder, _ = tiny_checkpoint("llama")
    capsys.readouterr()   # NOTE: building the checkpoint (first use) writes a progress bar
    assert main(["generate", "hi", "--model", str(folder), "--tp", "3"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "tp_size (--tp) 3" in err and "num_attention_heads" in err


def test_a_moe_model_is_refused_naming_tp_size(tiny_checkpoint):
    """Mixture-of-experts families do not run under tensor parallelism: refused by name."""
    folder, _ = tiny_checkpoint("mixtral")
    with pytest.raises(ValueError, match=r"tp_size \(--tp\) 2: tensor parallelism runs dense"):
        check_tp_model(folder, 2)


def test_fewer_kv_heads_than_ranks_are_replicated_with_their_query_heads(tiny_checkpoint):
    """4 ranks over 2 KV heads: rank r keeps query head r and KV head r // 2 (its group)."""
    from exec.loading.model_files import load_model

    folder, _ = tiny_checkpoint("llama")
    full = load_model(folder).model.layers[0].self_attn
    d = full.d
    for rank in range(4):
        model = load_model(folder)
        shard_model(model, TPGroup(rank, 4))
        attn = model.model.layers[0].self_attn
        assert (attn.hq, attn.hkv) == (1, 1)
        kv = rank // 2
        torch.testing.assert_close(attn.q_proj.weight, full.q_proj.weight[rank * d:(rank + 1) * d])
        torch.testing.assert_close(attn.k_proj.weight, full.k_proj.weight[kv * d:(kv + 1) * d])
        torch.testing.assert_close(attn.v_proj.weight, full.v_proj.weight[kv * d:(kv + 1) * d])
