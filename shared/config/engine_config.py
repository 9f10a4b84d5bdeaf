"""`EngineConfig` (SGLang's server-argument names and defaults) and `ModelInfo`.

`EngineConfig.resolve(model_info, kv_capacity)` returns the *effective* config: every
default derived (context length from the model, KV capacity from the executor rounded
down to whole pages,
max_running_requests as semantics §3.1, cuda_graph_max_bs 160, chunking disabled -> None).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SCHEDULE_POLICIES = ("fcfs", "lpm", "dfs-weight", "lof", "random")
DEFAULT_CUDA_GRAPH_MAX_BS = 160


@dataclass(frozen=True)
class ModelInfo:
    """What the scheduler needs from a model; both executors provide it."""

    vocab_size: int
    eos_token_ids: tuple[int, ...]
    context_length: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "eos_token_ids", tuple(int(t) for t in self.eos_token_ids))
        _positive("vocab_size", self.vocab_size)
        _positive("context_length", self.context_length)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "eos_token_ids": list(self.eos_token_ids)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelInfo:
        return cls(**d)


@dataclass(frozen=True)
class EngineConfig:
    page_size: int = 1
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int | None = 8192
    enable_mixed_chunk: bool = False
    schedule_policy: str = "fcfs"
    random_seed: int = 0
    disable_radix_cache: bool = False
    schedule_conservativeness: float = 1.0
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    context_length: int | None = None
    disable_overlap_schedule: bool = False  # SGLang's default: the overlap scheduler
    # NOTE: TensorRT-LLM's GUARANTEED_NO_EVICT capacity policy, not an SGLang flag: every
    # running request reserves all of its remaining output (new_token_ratio held at 1.0).
    guaranteed_no_evict: bool = False

    @property
    def overlap(self) -> bool:
        """SGLang's overlap schedule: batch N+1 is scheduled before N's result is processed."""
        return not self.disable_overlap_schedule

    def __post_init__(self) -> None:
        _positive("page_size", self.page_size)
        _positive("max_prefill_tokens", self.max_prefill_tokens)
        for name in ("max_total_tokens", "max_running_requests", "cuda_graph_max_bs",
                     "context_length"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        for name in ("enable_mixed_chunk", "disable_radix_cache", "disable_cuda_graph",
                     "disable_overlap_schedule", "guaranteed_no_evict"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise ValueError(f"schedule_policy: unknown policy {self.schedule_policy!r}; "
                             f"choose one of {', '.join(SCHEDULE_POLICIES)}")
        if not self.schedule_conservativeness > 0:
            raise ValueError(f"schedule_conservativeness must be > 0, "
                             f"got {self.schedule_conservativeness!r}")
        if self.chunk_size is not None and self.chunk_size < self.page_size:
            raise ValueError(f"chunked_prefill_size ({self.chunked_prefill_size}) must be at least "
                             f"page_size ({self.page_size}), or <= 0 / None to disable chunking")
        if self.max_total_tokens is not None and self.max_total_tokens < 2 * self.page_size:
            raise ValueError(f"max_total_tokens ({self.max_total_tokens}) must hold at least "
                             f"two pages of page_size {self.page_size}")

    @property
    def chunk_size(self) -> int | None:
        """The chunked-prefill budget, None when chunking is disabled (None or <= 0)."""
        c = self.chunked_prefill_size
        return c if c is not None and c > 0 else None

    def resolve(self, model_info: ModelInfo, kv_capacity: int | None = None) -> EngineConfig:
        """The effective config. `kv_capacity` (tokens) is the executor's estimate, used when
        `max_total_tokens` is None."""
        total = self.max_total_tokens if self.max_total_tokens is not None else kv_capacity
        if total is None:
            raise ValueError("max_total_tokens: not set and the executor gave no KV capacity")
        total = total // self.page_size * self.page_size  # whole pages only (as SGLang)
        context = self.context_length or model_info.context_length
        if context > model_info.context_length:
            raise ValueError(f"context_length ({context}) is longer than the model's context "
                             f"length ({model_info.context_length}): positions past it were "
                             f"never trained; leave context_length unset or lower it")
        return dataclasses.replace(
            self, max_total_tokens=total, context_length=context,
            max_running_requests=derive_max_running(self.max_running_requests, total, context),
            chunked_prefill_size=self.chunk_size,
            cuda_graph_max_bs=self.cuda_graph_max_bs or DEFAULT_CUDA_GRAPH_MAX_BS)

    def max_forward_tokens(self) -> int:
        """The most tokens one forward of this *effective* config (`resolve`) can hold.

        DECODE: one per running request. EXTEND / MIXED: the chunk budget covers the
        prefill and the mixed decodes together (PrefillAdder pre-charges it with them);
        without chunking, the first request is admitted whole whatever its length (at most
        the context), the rest within max_prefill_tokens, plus the mixed decodes."""
        running = self.max_running_requests
        if running is None or self.context_length is None:
            raise ValueError("max_forward_tokens needs the effective config (EngineConfig.resolve)")
        mixed = running if self.enable_mixed_chunk else 0
        if self.chunk_size is not None:
            extend = max(self.chunk_size, mixed)
        else:
            extend = max(self.context_length, self.max_prefill_tokens) + mixed
        return max(running, extend)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineConfig:
        return cls(**d)

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> EngineConfig:
        """The config of these fields (`check_fields` first: an unknown one is a TypeError)."""
        cls.check_fields(kwargs)
        return cls(**kwargs)

    @classmethod
    def check_fields(cls, kwargs: Mapping[str, Any]) -> None:
        """TypeError naming the keys that are no EngineConfig field (and listing the fields)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise TypeError(f"unknown engine argument(s) {unknown}; EngineConfig fields are "
                            f"{sorted(names)}")


def derive_max_running(user: int | None, token_capacity: int, context_len: int) -> int:
    """Semantics §3.1: est = clamp(capacity / context * 512, 2048, 4096); min with the
    user's value when set, else with capacity // 2."""
    est = min(max(int(token_capacity / context_len * 512), 2048), 4096)
    return min(user, est) if user is not None else max(1, min(est, token_capacity // 2))


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
