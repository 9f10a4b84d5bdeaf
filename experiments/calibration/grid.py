"""The batch shapes `batchtwin calibrate` measures, as workloads the real executor serves.

Each `Scenario` is one or more workloads served one after another on the same Engine
(`Engine.run`), so its steps are ordinary scheduler steps with measured durations:

- prefill L: one L-token prompt (a prefill step, then one decode at batch 1);
- prefix P+E: a P-token prompt, then the same P tokens plus E new ones (an extend whose
  first P tokens come from the radix cache);
- decode B x K: B prompts of K tokens at once, then `decode_steps` decodes at batch B;
- ragged K1,K2,...: prompts of different lengths at once (padded attention: short rows
  read as many keys as the longest);
- mixed B + L: B short requests, and an L-token prompt arriving while they decode (with
  `enable_mixed_chunk` its chunks carry the B decodes: MIXED batches);
- online: a short Poisson run of ShareGPT-like requests (arrivals in wall-clock time), so
  the fit also sees batches as they come and go in serving.

Token ids are drawn from one seeded generator; every scenario gets fresh ids, so nothing
but the prefix scenario hits the cache. Request ids are unique per scenario and repeat.
Every request samples at `temperature` (seed = the engine's): the cost of sampling a row is
part of what the fit prices, so calibrate at the temperature you will serve (0: greedy).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from shared.request.sampling_params import SamplingParams
from shared.workload.sharegpt import ShareGPTLike
from shared.workload.workload import Workload, WorkloadRequest

MIXED_SHORT_PROMPT = 32
MIXED_ARRIVAL_S = 1e-3   # the long prompt arrives during the first (prefill) step


@dataclass(frozen=True)
class ShapeGrid:
    prefill_lens: tuple[int, ...]
    prefix_lens: tuple[int, ...]        # cached prefix P, each extended by extend_len
    extend_len: int
    decode: tuple[tuple[int, int], ...]  # (batch size, prompt length) of decoding requests
    decode_steps: int
    ragged: tuple[tuple[int, ...], ...]  # prompt lengths of decoding requests of mixed lengths
    mixed_batch_sizes: tuple[int, ...]  # decodes running beside a chunked prefill
    mixed_prompt_len: int
    online_requests: int = 0            # requests of the online scenario (0: none)
    online_rate: float = 4.0


TRAIN_GRID = ShapeGrid(prefill_lens=(16, 64, 256, 512, 1024), prefix_lens=(256, 1024),
                       extend_len=64,
                       decode=((1, 64), (1, 1024), (2, 128), (4, 64), (4, 512), (8, 256),
                               (16, 64), (16, 256), (32, 64), (32, 128)),
                       decode_steps=8,
                       ragged=((32, 64, 128, 256, 512, 1024), (16,) * 7 + (768,),
                               tuple(range(64, 448, 32))),
                       mixed_batch_sizes=(4, 16), mixed_prompt_len=2048, online_requests=24)
HELD_OUT_GRID = ShapeGrid(prefill_lens=(48, 384, 768), prefix_lens=(512,), extend_len=128,
                          decode=((1, 512), (3, 96), (6, 384), (12, 128), (24, 96)),
                          decode_steps=6, ragged=((48, 200, 700), (24,) * 10 + (512, 1000)),
                          mixed_batch_sizes=(8,), mixed_prompt_len=1536)


class Scenario(NamedTuple):
    name: str
    workloads: tuple[Workload, ...]


def scenarios(grid: ShapeGrid, vocab_size: int, chunk_size: int, seed: int = 0,
              tag: str = "", temperature: float = 1.0) -> list[Scenario]:
    """Every scenario of `grid`, request ids prefixed with `tag` (unique per repeat)."""
    b = _Builder(np.random.default_rng(seed), vocab_size, tag, temperature)
    out = [b.one(f"prefill-{n}", [(0.0, b.tokens(n), 2)]) for n in grid.prefill_lens]
    out += [b.prefix(p, grid.extend_len) for p in grid.prefix_lens]
    out += [b.one(f"decode-{bs}x{k}", [(0.0, b.tokens(k), grid.decode_steps + 1) for _ in range(bs)])
            for bs, k in grid.decode]
    out += [b.one(f"ragged-{min(ks)}..{max(ks)}x{len(ks)}",
                  [(0.0, b.tokens(k), grid.decode_steps + 1) for k in ks]) for ks in grid.ragged]
    chunks = -(-grid.mixed_prompt_len // chunk_size)
    out += [b.one(f"mixed-{bs}+{grid.mixed_prompt_len}",
                  [(0.0, b.tokens(MIXED_SHORT_PROMPT), chunks + 3) for _ in range(bs)]
                  + [(MIXED_ARRIVAL_S, b.tokens(grid.mixed_prompt_len), 1)])
            for bs in grid.mixed_batch_sizes]
    if grid.online_requests:
        out.append(b.online(grid.online_requests, grid.online_rate, seed))
    return out


class _Builder:
    def __init__(self, rng: np.random.Generator, vocab_size: int, tag: str,
                 temperature: float) -> None:
        self.rng, self.vocab_size, self.tag, self.temperature = rng, vocab_size, tag, temperature

    def tokens(self, n: int) -> tuple[int, ...]:
        return tuple(self.rng.integers(0, self.vocab_size, n).tolist())

    def one(self, name: str, reqs: list[tuple[float, tuple[int, ...], int]]) -> Scenario:
        return Scenario(name, (self.workload(name, reqs),))

    def prefix(self, prefix_len: int, extend_len: int) -> Scenario:
        name, shared = f"prefix-{prefix_len}+{extend_len}", self.tokens(prefix_len)
        first = self.workload(f"{name}-a", [(0.0, shared, 1)])
        second = self.workload(f"{name}-b", [(0.0, shared + self.tokens(extend_len), 2)])
        return Scenario(name, (first, second))

    def online(self, n: int, rate: float, seed: int) -> Scenario:
        traffic = ShareGPTLike(n, prompt_median=128, output_median=32, sigma=0.6, max_len=1024,
                               sampling_params=SamplingParams(temperature=self.temperature,
                                                              ignore_eos=True))
        w = traffic.build(vocab_size=self.vocab_size, seed=seed + 7919, rate=rate)
        tagged = tuple(dataclasses.replace(r, rid=f"{self.tag}online-{r.rid}") for r in w)
        return Scenario("online", (Workload(tagged, name="online"),))

    def workload(self, name: str, reqs: list[tuple[float, tuple[int, ...], int]]) -> Workload:
        return Workload(tuple(
            WorkloadRequest(f"{self.tag}{name}-{i}", t, ids,
                            SamplingParams(max_new_tokens=n, temperature=self.temperature,
                                           ignore_eos=True))
            for i, (t, ids, n) in enumerate(reqs)), name=name)
