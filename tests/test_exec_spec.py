"""exec honours the spec (ARCHITECTURE §6.2): the positions fed to rotary embeddings, the KV slots
written and the hidden rows fed to the LM head are exactly the spec's."""

import numpy as np
import torch
from hypothesis import given, settings

from exec.engine.engine import Engine, load_model
from exec.runner.model_runner import TorchModelRunner
from shared import EngineConfig, ModelInfo, Req, SamplingParams, Scheduler
from tests.scripted_runner import drive
from tests.strategies import scheduler_cases


class SpecWatcher:
    """Wraps a TorchModelRunner; checks every forward against its ForwardBatch."""

    def __init__(self, runner: TorchModelRunner) -> None:
        self.runner = runner
        self.forwards = 0
        model = runner.model
        self._rotary, self._lm_head = model.model.rotary_emb.forward, model.compute_logits
        model.model.rotary_emb.forward = self._record_positions
        model.compute_logits = self._record_lm_head_rows
        self._model_forward = model.forward
        model.forward = self._record_hidden

    def _record_positions(self, positions, dtype):
        self.positions = positions.clone()
        return self._rotary(positions, dtype)

    def _record_hidden(self, *args):
        self.hidden = self._model_forward(*args)
        return self.hidden

    def _record_lm_head_rows(self, rows):
        self.lm_head_rows = rows.clone()
        return self._lm_head(rows)

    def forward(self, fb):
        k = self.runner.kv_pool.k
        loc = torch.from_numpy(fb.out_cache_loc)
        k[:, loc] = float("nan")   # every slot the spec says is written must come back filled
        before = k.clone()
        out = self.runner.forward(fb)
        assert torch.equal(self.positions, torch.from_numpy(fb.positions))
        assert not k[:, loc].isnan().any(), "a slot of out_cache_loc was not written"
        others = torch.ones(k.shape[1], dtype=torch.bool)
        others[loc] = False
        assert torch.equal(k[:, others], before[:, others]), "a slot outside out_cache_loc changed"
        rows = torch.from_numpy(fb.logit_rows.pruned_rows)
        assert torch.equal(self.lm_head_rows, self.hidden[rows])
        self.forwards += 1
        return out

    def sample(self, out, fb):
        return self.runner.sample(out, fb)


@settings(max_examples=25)
@given(case=scheduler_cases())
def test_positions_slots_and_lm_head_rows_are_the_specs(tiny_checkpoint, case):
    """On random workloads (chunked, mixed, paged, cached, retracted) every forward feeds
    the spec's positions to RoPE, writes exactly out_cache_loc, and sends pruned_rows to
    the LM head; the idle leak check passes."""
    folder, _ = tiny_checkpoint("llama")
    config, workload = case
    info = ModelInfo(256, (0,), 512)
    sched = Scheduler(EngineConfig(**config), info)
    watcher = SpecWatcher(TorchModelRunner(load_model(folder), sched.config, info))
    reqs = [Req(f"r{i}", p, SamplingParams(max_new_tokens=m, temperature=0, ignore_eos=True), arrival_time=t)
            for i, (p, m, t) in enumerate(workload)]
    drive(sched, watcher, reqs)
    assert watcher.forwards == len(sched.trace.steps)
    sched.mem.check_idle()


def test_golden_example_through_engine_matches_the_design(tiny_checkpoint):
    """Two generate calls reproduce ARCHITECTURE.md §4's EXTEND and DECODE steps field by field
    (the example's schedule: no overlap)."""
    folder, _ = tiny_checkpoint("llama")
    engine = Engine(folder, max_total_tokens=256, chunked_prefill_size=None,
                    disable_overlap_schedule=True)
    engine.generate([21, 22, 23], {"max_new_tokens": 1})
    outs = engine.generate([[11, 12, 13, 14, 15, 16], [21, 22, 23, 24, 25, 26]],
                           {"max_new_tokens": 2, "ignore_eos": True})
    ext, dec = engine.trace.steps[1], engine.trace.steps[2]
    assert (ext.forward_mode, dec.forward_mode) == ("EXTEND", "DECODE")
    assert ext.input_ids == (11, 12, 13, 14, 15, 16, 24, 25, 26)
    assert ext.positions == (0, 1, 2, 3, 4, 5, 3, 4, 5)
    assert (ext.extend_prefix_lens, ext.extend_seq_lens, ext.seq_lens) == ((0, 3), (6, 3), (6, 6))
    assert (ext.extend_start_loc, ext.pruned_rows) == ((0, 6), (5, 8))
    assert dec.input_ids == tuple(o.token_ids[0] for o in outs)
    assert (dec.positions, dec.seq_lens, dec.pruned_rows) == ((6, 6), (7, 7), (0, 1))
    assert all(s.duration > 0 for s in engine.trace.steps)
    assert engine.trace.engine_config.max_total_tokens == 256
    assert np.isfinite(outs[0].meta["ttft"]) and outs[1].meta["cached_tokens"] == 3
