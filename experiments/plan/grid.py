"""The configurations `batchtwin plan` compares: every combination of hardware, TP degree and
engine knob values given on the command line (comma lists; `auto` / `off` for None).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

KNOBS = ("chunked_prefill_size", "max_running_requests", "page_size", "schedule_policy")
NONE_WORDS = {"chunked_prefill_size": "off", "max_running_requests": "auto"}


@dataclass(frozen=True)
class Candidate:
    """One configuration: where it runs and the engine knobs (None: the engine's choice)."""

    hardware: str
    tp: int
    chunked_prefill_size: int | None
    max_running_requests: int | None
    page_size: int
    schedule_policy: str

    @property
    def num_gpus(self) -> int:
        return self.tp

    def engine_args(self) -> dict[str, Any]:
        """EngineConfig fields (chunked_prefill_size None disables chunking)."""
        return {k: getattr(self, k) for k in KNOBS}

    @property
    def label(self) -> str:
        return (f"{self.hardware} tp{self.tp} chunk={show(self, 'chunked_prefill_size')} "
                f"running={show(self, 'max_running_requests')} page={self.page_size} "
                f"{self.schedule_policy}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def show(c: Candidate, knob: str) -> str:
    value = getattr(c, knob)
    return NONE_WORDS[knob] if value is None else str(value)


@dataclass(frozen=True)
class Grid:
    """Values to sweep, one tuple per axis."""

    hardware: tuple[str, ...] = ("h100",)
    tp: tuple[int, ...] = (1,)
    chunked_prefill_size: tuple[int | None, ...] = (2048, 8192)
    max_running_requests: tuple[int | None, ...] = (128, 256, None)
    page_size: tuple[int, ...] = (1,)
    schedule_policy: tuple[str, ...] = ("fcfs",)

    def candidates(self) -> list[Candidate]:
        axes = [getattr(self, f.name) for f in dataclasses.fields(self)]
        return [Candidate(*values) for values in itertools.product(*axes)]

    def to_dict(self) -> dict[str, list[Any]]:
        return {k: list(v) for k, v in dataclasses.asdict(self).items()}


def parse_list(text: str, flag: str, convert: Callable[[str], Any],
               none_word: str | None = None) -> tuple[Any, ...]:
    """`a,b,c` -> converted values, in order, duplicates dropped; ValueError naming `flag`."""
    values: list[Any] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if none_word is not None and item.lower() == none_word:
            value = None
        else:
            try:
                value = convert(item)
            except ValueError:
                words = f" or {none_word}" if none_word else ""
                raise ValueError(f"{flag}: bad value {item!r} (expected {convert.__name__}"
                                 f"{words})") from None
        if value not in values:
            values.append(value)
    if not values:
        raise ValueError(f"{flag}: give at least one value")
    return tuple(values)


def check_candidates(model: str, candidates: Sequence[Candidate]) -> None:
    """Every name and knob is known and valid for the model; ValueError naming the bad one."""
    from shared.engine_config import EngineConfig
    from sim.hardware import get_hardware
    from sim.roofline import check_tp
    from sim.simulate import load_model

    _, shape = load_model(model)
    for c in candidates:
        get_hardware(c.hardware)
        check_tp(c.tp, shape)
        try:
            EngineConfig(**c.engine_args())
        except ValueError as e:
            raise ValueError(f"{c.label}: {e}") from None
