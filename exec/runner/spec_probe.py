"""The exec side of the conformance kit (ARCHITECTURE §6.2): `TorchSpecProbe` watches a
TorchModelRunner's internals during a forward, for `sim.conformance`'s SpecCheckingRunner.

    check_conformance(make_runner, case, probe=TorchSpecProbe)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np
import torch

from exec.runner.model_runner import TorchModelRunner
from shared.batch.forward_batch import ForwardBatch
from shared.loop.model_runner import RunnerOutput
from shared.loop.spec_observation import SpecObservation


@contextlib.contextmanager
def _patched(obj, name: str, fn: Callable):
    """Set an instance attribute for the duration, then restore what was there."""
    had, old = name in vars(obj), vars(obj).get(name)
    setattr(obj, name, fn)
    try:
        yield
    finally:
        if had:
            setattr(obj, name, old)
        else:
            delattr(obj, name)


def _changed_slots(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """[S] bool: slots (dim 1 of [layers, S, heads, dim]) whose contents changed (NaN-aware)."""
    same = (before == after) | (before.isnan() & after.isnan())
    return ~same.transpose(0, 1).reshape(before.shape[1], -1).all(dim=1)


class TorchSpecProbe:
    """Watches a TorchModelRunner (ARCHITECTURE §6.2): the positions given to rotary, the KV slots
    written (the spec's slots are poisoned with NaN first, then the pool is diffed, so a slot
    rewritten with equal values still counts), and the hidden rows given to the LM head."""

    def __init__(self, runner: TorchModelRunner) -> None:
        self.runner = runner

    def observe(self, fb: ForwardBatch, forward) -> tuple[RunnerOutput, SpecObservation]:
        model, pool, seen = self.runner.model, self.runner.kv_pool, {}
        rotary, lm_head, body = model.model.rotary_emb.forward, model.compute_logits, model.forward

        def positions(pos, dtype):
            seen["positions"] = pos.detach().cpu().numpy().copy()
            return rotary(pos, dtype)

        def hidden(*args):
            seen["hidden"] = out = body(*args)
            return out

        def logits(rows):
            seen["lm_head_input"] = rows.detach().cpu().numpy().copy()
            return lm_head(rows)

        loc = torch.from_numpy(np.ascontiguousarray(fb.out_cache_loc))
        for t in pool.storage:   # per-head K and V, or MLA's latent
            t[:, loc] = float("nan")
        before = [t.clone() for t in pool.storage]
        with (_patched(model.model.rotary_emb, "forward", positions),
              _patched(model, "forward", hidden), _patched(model, "compute_logits", logits)):
            out = forward(fb)
        changed = [_changed_slots(b, t) for b, t in zip(before, pool.storage, strict=True)]
        written = torch.stack(changed).any(dim=0)                     # [S] bool
        return out, SpecObservation(
            seen.get("positions"), torch.nonzero(written).flatten().numpy(),
            seen["hidden"].detach().cpu().numpy() if "hidden" in seen else None,
            seen.get("lm_head_input"))
