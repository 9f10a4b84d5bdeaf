"""`GENERATORS`: the workload generators by the name `--workload` takes, a read-only table.

Each entry is a frozen spec class (one file each) whose fields are the traffic's shape and
whose `build(*, vocab_size, seed=0, rate=inf, burstiness=1.0)` draws the `Workload`:
everything (arrivals, lengths, token ids, order) from one `numpy.random.default_rng(seed)`,
so the same spec and arguments give an identical workload, and its `config` records the
generator, the build arguments and the shape (`shared.workload.draw`). For
the CLI it carries `DEFAULT_LENGTHS` (prompt, output: the lengths when `--prompt-len` /
`--output-len` are not given) and `from_flags(args, prompt_len, output_len)` (the spec the
workload flags describe). A new generator is one file plus one row here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from shared.workload.multi_tenant import MultiTenant
from shared.workload.multi_turn import MultiTurn
from shared.workload.sessions import Sessions
from shared.workload.shared_prefix import SharedPrefix
from shared.workload.sharegpt import ShareGPTLike
from shared.workload.synthetic import Synthetic
from shared.workload.workload import Workload


class Generator(Protocol):
    """What an entry of GENERATORS is (module doc)."""

    DEFAULT_LENGTHS: ClassVar[tuple[int, int]]

    @classmethod
    def from_flags(cls, args: Any, prompt_len: int, output_len: int) -> Generator: ...

    def build(self, *, vocab_size: int, seed: int = 0, rate: float = math.inf,
              burstiness: float = 1.0) -> Workload: ...


GENERATORS: Mapping[str, type[Generator]] = MappingProxyType({
    "sharegpt": ShareGPTLike,
    "synthetic": Synthetic,
    "shared-prefix": SharedPrefix,
    "multi-tenant": MultiTenant,
    "sessions": Sessions,
    "multi-turn": MultiTurn,
})
