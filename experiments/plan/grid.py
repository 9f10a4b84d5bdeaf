"""The configurations `batchtwin plan` compares: every combination of hardware, TP degree,
engine knob values, the run's parallelism and dtypes (`--ep-size`, `--quantization`,
`--kv-cache-dtype`), the replica count (`--dp`: that many engines behind the plan's
router) and prefill/decode layouts (`--disaggregate 1P2D,2P1D,off`) given on the command
line (comma lists; `auto` / `off` for None).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

KNOBS = ("chunked_prefill_size", "max_running_requests", "page_size", "schedule_policy")
RUN_AXES = ("ep_size", "quantization", "kv_cache_dtype")
NONE_WORDS = {"chunked_prefill_size": "off", "max_running_requests": "auto",
              "quantization": "auto", "disaggregate": "off"}


@dataclass(frozen=True)
class Candidate:
    """One configuration: where it runs and the engine knobs (None: the engine's choice)."""

    hardware: str
    tp: int
    chunked_prefill_size: int | None
    max_running_requests: int | None
    page_size: int
    schedule_policy: str
    ep_size: int = 1
    quantization: str | None = None    # None: the checkpoint's
    kv_cache_dtype: str = "auto"
    dp: int = 1                        # engine replicas behind the router, tp GPUs each
    disaggregate: str | None = None    # "xPyD": x prefill and y decode instances of tp GPUs

    @property
    def num_gpus(self) -> int:
        """tp GPUs per replica or instance (the experts are placed on them: ep divides tp)."""
        if self.disaggregate is not None:
            from sim.fleet.disagg_layout import parse_layout

            return self.tp * sum(parse_layout(self.disaggregate))
        return self.tp * self.dp

    def engine_args(self) -> dict[str, Any]:
        """EngineConfig fields (chunked_prefill_size None disables chunking)."""
        return {k: getattr(self, k) for k in KNOBS}

    def run_args(self) -> dict[str, Any]:
        """The Deployment's ep_size, quantization and kv_cache_dtype."""
        return {k: getattr(self, k) for k in RUN_AXES}

    def deployment(self, model: Any, **plan_wide: Any):
        """This candidate as one simulated engine instance (`sim.run.deployment.Deployment`)
        of `model`; `plan_wide`: the plan's expert_zipf, cost_model and engine_profile."""
        from sim.run.deployment import Deployment

        return Deployment(model=model, hardware=self.hardware, tp=self.tp, **self.run_args(),
                          **plan_wide, engine=self.engine_args())

    def layout(self, router: str | None):
        """How many such instances serve and how: one, `dp` behind `router`, or xPyD."""
        from sim.fleet.disagg_layout import Disaggregated, parse_layout
        from sim.fleet.fleet_layout import Fleet
        from sim.run.simulate import Single

        if self.disaggregate is not None:
            prefill, decode = parse_layout(self.disaggregate)
            return Disaggregated(prefill, decode, prefill_router=router)
        return Fleet(self.dp, router) if self.dp > 1 else Single()

    @property
    def label(self) -> str:
        ep = f" ep{self.ep_size}" if self.ep_size > 1 else ""
        quant = "" if self.quantization is None else f" {self.quantization}"
        kv = "" if self.kv_cache_dtype == "auto" else f" kv={self.kv_cache_dtype}"
        dp = f" dp{self.dp}" if self.dp > 1 else ""
        dp += f" {self.disaggregate}" if self.disaggregate else ""
        return (f"{self.hardware} tp{self.tp}{dp}{ep}{quant}{kv} "
                f"chunk={show(self, 'chunked_prefill_size')} "
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
    ep_size: tuple[int, ...] = (1,)
    quantization: tuple[str | None, ...] = (None,)
    kv_cache_dtype: tuple[str, ...] = ("auto",)
    dp: tuple[int, ...] = (1,)
    disaggregate: tuple[str | None, ...] = (None,)

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
    from shared.config.engine_config import EngineConfig
    from sim.hardware.lookup import get_hardware
    from sim.hardware.precision import check_precision, run_dtypes
    from sim.model.parallelism import check_ep, check_tp
    from sim.run.build import load_model

    _, checkpoint = load_model(model)
    for c in candidates:
        hw = get_hardware(c.hardware)
        shape = checkpoint.with_dtypes(*run_dtypes(checkpoint.weight_dtype, c.quantization,
                                                   c.kv_cache_dtype))
        check_precision(hw, shape.weight_dtype, c.quantization)
        check_tp(c.tp, shape)
        check_ep(c.ep_size, c.tp, shape)
        if c.dp < 1:
            raise ValueError(f"--dp: replicas must be >= 1, got {c.dp}")
        if c.disaggregate is not None:
            from sim.fleet.disagg_layout import parse_layout

            parse_layout(c.disaggregate)
            if c.dp > 1:
                raise ValueError(f"{c.label}: --disaggregate sets the instance counts; a "
                                 f"disaggregated layout takes --dp 1")
        try:
            EngineConfig(**c.engine_args())
        except ValueError as e:
            raise ValueError(f"{c.label}: {e}") from None
