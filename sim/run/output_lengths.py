"""`OutputLengths`: where a simulated server's answers end when they are not run to
`max_tokens`: each request's length is one draw from a length distribution, seeded by
(seed, rid) alone (BLAKE2b, as the synthetic token source keys its ids), and the token at
that length is the model's EOS, so the scheduler ends the request with finish reason stop,
the trace records the EOS and a replay of it ends the request at the same token.

A request with `ignore_eos` runs to its `max_tokens` regardless; one whose draw is past its
`max_tokens` ends there with finish reason length; one with `min_new_tokens` generates at
least that many tokens before its EOS.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from shared.workload.length_dist import LengthDist


@dataclass(frozen=True)
class OutputLengths:
    dist: LengthDist
    eos_token_id: int
    seed: int = 0

    def length(self, rid: str, min_new_tokens: int = 0) -> int:
        """The request's answer length in tokens, the same in every process: the draw, or
        min_new_tokens + 1 if that is longer (the EOS is masked while fewer than
        min_new_tokens tokens were generated, as SGLang's min_new_tokens penalizer masks it)."""
        digest = hashlib.blake2b(f"{self.seed}\x00{rid}".encode(), digest_size=8).digest()
        rng = np.random.default_rng(int.from_bytes(digest, "little"))
        return max(int(self.dist.sample(rng, 1)[0]), min_new_tokens + 1)

    def with_eos(self, reqs, ids: np.ndarray, ends: dict[str, int]) -> np.ndarray:
        """[B] `ids` (one sampled id per request of the step) with the EOS in place of the
        token each request whose answer ends (`ends`: rid -> length) gets at its length.
        NOTE: a request still in its prefill chunks gets no token from this step."""
        out = ids
        for i, req in enumerate(reqs):
            end = ends.get(req.rid)
            if end is not None and req.is_chunked == 0 and len(req.output_ids) + 1 >= end:
                out = out.copy() if out is ids else out
                out[i] = self.eos_token_id
        return out
