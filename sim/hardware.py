"""The hardware catalogue: peak FLOP/s, memory, interconnect and achieved-efficiency factors,
with the source of every number (ARCHITECTURE §5; numbers from reference/simulators.md §8).

Units are SI: FLOP/s, bytes/s, bytes (1 GB = 1e9 bytes, vendor convention). FLOP/s are dense
(no 2:4 sparsity). `interconnect_bw` is the per-GPU bandwidth in one direction (NVIDIA quotes
both directions added: H100's "900 GB/s NVLink" is 450 GB/s each way), which is what a ring
all-reduce moves data at. `None` for a peak means the chip has no such unit (A100 has no FP8
tensor cores) or no figure is known; its source says which.

Users add or override entries in a JSON file: a top-level object mapping key -> entry, whose
fields are the `Hardware` field names (SI units), plus an optional `"base": "<known key>"` to
start from an existing entry. An entry whose key is already known overrides that entry's
fields. A number changed without a source is sourced to the file it came from.

There is no "this machine" entry: a machine's own numbers come from calibration
(`sim.calibrated.CalibratedCostModel.fit` on exec's step records), never typed in here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

PEAK_FIELDS = ("flops_bf16", "flops_fp8", "flops_fp32")
OPTIONAL_FIELDS = ("flops_fp8", "flops_fp32")
EFFICIENCY_FIELDS = ("compute_efficiency", "memory_efficiency", "interconnect_efficiency")
NUMBER_FIELDS = (*PEAK_FIELDS, "mem_bw", "mem_capacity", "interconnect_bw", *EFFICIENCY_FIELDS)
CALIBRATED_KEYS = ("this-machine", "local", "calibrated")


class Efficiencies(NamedTuple):
    """Achieved fractions of peak: GEMM/attention FLOP/s, HBM bandwidth, interconnect."""

    compute: float
    memory: float
    interconnect: float


@dataclass(frozen=True)
class Hardware:
    """One accelerator. Every number in NUMBER_FIELDS has an entry in `sources`."""

    key: str
    name: str
    flops_bf16: float                 # dense bf16/fp16 tensor FLOP/s
    flops_fp8: float | None           # dense fp8 tensor FLOP/s; None: no fp8 units
    flops_fp32: float | None          # fp32 (non-tensor) FLOP/s; None: unknown
    mem_bw: float                     # HBM bytes/s
    mem_capacity: float               # HBM bytes
    interconnect_bw: float            # bytes/s per GPU, one direction
    compute_efficiency: float
    memory_efficiency: float
    interconnect_efficiency: float
    sources: tuple[tuple[str, str], ...]
    low_confidence: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.sources, Mapping):
            object.__setattr__(self, "sources", tuple(sorted(self.sources.items())))
        if not isinstance(self.name, str) or not isinstance(self.low_confidence, bool):
            raise ValueError(f"name must be a string and low_confidence a boolean, got "
                             f"{self.name!r}, {self.low_confidence!r}")
        for name in NUMBER_FIELDS:
            _check_number(name, getattr(self, name), optional=name in OPTIONAL_FIELDS,
                          at_most_one=name in EFFICIENCY_FIELDS)
        _check_sources(dict(self.sources))

    def source(self, field: str) -> str:
        """Where the number in `field` comes from."""
        return dict(self.sources)[field]

    @property
    def efficiencies(self) -> Efficiencies:
        return Efficiencies(self.compute_efficiency, self.memory_efficiency,
                            self.interconnect_efficiency)

    def peak_flops(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for a canonical dtype name (bf16, fp16, fp8, fp32)."""
        if dtype in ("bf16", "fp16"):
            return self.flops_bf16
        if dtype in ("fp8", "fp32"):
            return getattr(self, f"flops_{dtype}")
        raise ValueError(f"unknown dtype {dtype!r}; choose one of bf16, fp16, fp8, fp32")

    def ridge_point(self, dtype: str = "bf16") -> float:
        """FLOP per byte where compute and bandwidth limits meet (peak numbers)."""
        return (self.peak_flops(dtype) or math.nan) / self.mem_bw

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "sources": dict(self.sources)}


def _check_number(name: str, value: Any, optional: bool, at_most_one: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if at_most_one and value > 1:
        raise ValueError(f"{name} is a fraction of peak in (0, 1], got {value!r}")


def _check_sources(sources: dict[str, str]) -> None:
    missing = [n for n in NUMBER_FIELDS if not str(sources.get(n, "")).strip()]
    if missing:
        raise ValueError(f"no source for {', '.join(missing)}: every number needs one")
    extra = sorted(set(sources) - set(NUMBER_FIELDS))
    if extra:
        raise ValueError(f"sources name unknown fields {extra}; fields: {', '.join(NUMBER_FIELDS)}")


# Sources, quoted per number below (reference/simulators.md §8 unless said otherwise).
_A100 = ("NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf) via "
         "glennklockwood.com/garden/processors/A100")
_H100 = ("NVIDIA H100 SXM5 datasheet ('shown with sparsity; 1/2 lower without') via "
         "glennklockwood.com/garden/processors/h100")
_H200 = "NVIDIA H200 SXM spec (lzwjava.github.io/nvidia-h200-gpu-specs-en; same GH100 die as H100)"
_B200 = "NVIDIA HGX B200 (1000 W) figures via glennklockwood.com/garden/processors/B200"
_BLIS = ("BLIS hardware_config.json MFU 'calibrated per discussion #589' "
         "(reference/simulators.md §8)")
_ASSUMED_MEM = "assumption: 80% of peak HBM bandwidth in streaming GEMV/attention; calibrate"
_ASSUMED_IC = "assumption: 75% of one-direction link bandwidth as NCCL ring bus bandwidth; calibrate"

CATALOGUE = (
    Hardware(
        key="a100-80g", name="NVIDIA A100-SXM4-80GB",
        flops_bf16=312e12, flops_fp8=None, flops_fp32=19.5e12,
        mem_bw=2.039e12, mem_capacity=80e9, interconnect_bw=300e9,
        compute_efficiency=0.38, memory_efficiency=0.80, interconnect_efficiency=0.75,
        sources={
            "flops_bf16": f"312 TFLOP/s dense BF16 tensor: {_A100}",
            "flops_fp8": f"none: Ampere has no FP8 tensor cores ({_A100} lists no FP8); "
                         "fp8 weights are priced weight-only at the bf16 rate",
            "flops_fp32": f"19.5 TFLOP/s FP32 (non-tensor): {_A100}",
            "mem_bw": f"2.039 TB/s HBM2e (SXM4 80G): {_A100}",
            "mem_capacity": f"80 GB HBM2e: {_A100}",
            "interconnect_bw": f"NVLink 3 '300+300 GB/s' (600 GB/s both ways): {_A100}",
            "compute_efficiency": f"A100 prefill MFU 0.38: {_BLIS}",
            "memory_efficiency": _ASSUMED_MEM,
            "interconnect_efficiency": _ASSUMED_IC,
        }),
    Hardware(
        key="h100", name="NVIDIA H100 SXM5 80GB",
        flops_bf16=989.4e12, flops_fp8=1978.9e12, flops_fp32=66.9e12,
        mem_bw=3.35e12, mem_capacity=80e9, interconnect_bw=450e9,
        compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
        sources={
            "flops_bf16": f"989.4 TFLOP/s dense BF16 (1,979 sparse): {_H100}",
            "flops_fp8": f"1,978.9 TFLOP/s dense FP8 (3,958 sparse): {_H100}",
            "flops_fp32": f"66.9 TFLOP/s FP32 (non-tensor): {_H100}",
            "mem_bw": f"3.35 TB/s HBM3: {_H100}",
            "mem_capacity": f"80 GB HBM3: {_H100}",
            "interconnect_bw": f"NVLink 4 900 GB/s both ways = 450 GB/s each way: {_H100}",
            "compute_efficiency": f"H100 prefill MFU 0.45: {_BLIS}",
            "memory_efficiency": _ASSUMED_MEM,
            "interconnect_efficiency": _ASSUMED_IC,
        }),
    Hardware(
        key="h200", name="NVIDIA H200 SXM 141GB",
        flops_bf16=989.4e12, flops_fp8=1978.9e12, flops_fp32=66.9e12,
        mem_bw=4.8e12, mem_capacity=141e9, interconnect_bw=450e9,
        compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
        sources={
            "flops_bf16": f"989 TFLOP/s dense BF16, same GH100 compute as H100: {_H200}; {_H100}",
            "flops_fp8": f"3,958 TFLOP/s FP8 'with sparsity' -> 1,978.9 dense: {_H200}",
            "flops_fp32": f"same GH100 die as H100 (66.9 TFLOP/s FP32): {_H100}",
            "mem_bw": f"4.8 TB/s HBM3e: {_H200}",
            "mem_capacity": f"141 GB HBM3e: {_H200}",
            "interconnect_bw": f"NVLink 4 900 GB/s both ways = 450 GB/s each way: {_H200}",
            "compute_efficiency": f"H100's prefill MFU 0.45 (same compute die): {_BLIS}",
            "memory_efficiency": _ASSUMED_MEM,
            "interconnect_efficiency": _ASSUMED_IC,
        }),
    Hardware(
        key="b200", name="NVIDIA B200 (HGX, 1000 W)",
        flops_bf16=2250e12, flops_fp8=4500e12, flops_fp32=80e12,
        mem_bw=8.0e12, mem_capacity=180e9, interconnect_bw=900e9,
        compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
        sources={
            "flops_bf16": f"2,250 TFLOP/s dense BF16 (4,500 sparse): {_B200}",
            "flops_fp8": f"4,500 TFLOP/s dense FP8 (9,000 sparse): {_B200}",
            "flops_fp32": f"80 TFLOP/s FP32 (non-tensor): {_B200}",
            "mem_bw": f"8 TB/s HBM3e: {_B200}",
            "mem_capacity": "180 GB usable of 192 GB raw HBM3e (reference/simulators.md §8; "
                            "docs.vultr.com inference cookbook sees 179 GB per GPU)",
            "interconnect_bw": f"NVLink 5 '2x 900 GB/s' (1.8 TB/s both ways): {_B200}",
            "compute_efficiency": f"assumption: H100's prefill MFU 0.45 ({_BLIS}); "
                                  "no published B200 figure",
            "memory_efficiency": _ASSUMED_MEM,
            "interconnect_efficiency": _ASSUMED_IC,
        }),
    Hardware(
        key="910b", name="Huawei Ascend 910B2 (LOW CONFIDENCE)",
        flops_bf16=354e12, flops_fp8=None, flops_fp32=None,
        mem_bw=1.6e12, mem_capacity=64e9, interconnect_bw=196e9,
        compute_efficiency=0.38, memory_efficiency=0.80, interconnect_efficiency=0.75,
        low_confidence=True,
        sources={
            "flops_bf16": "LOW CONFIDENCE: ~354 TFLOP/s FP16/BF16 cube (910B2; 910B3 ~295) from an "
                          "Ascend simulator's hardware table in public code (reference/simulators.md "
                          "§8); third-party pages say ~320; verify with an on-device GEMM",
            "flops_fp8": "none: 910B has no FP8 (FP8 arrives with Ascend 950, Huawei roadmap per "
                         "besthub.dev Ascend 910C->970 article)",
            "flops_fp32": "unknown: no vendor FP32 figure found; add one in a JSON file",
            "mem_bw": "LOW CONFIDENCE: ~1.6 TB/s HBM2e (third-party pages quote 1.2-1.6 TB/s; "
                      "reference/simulators.md §8)",
            "mem_capacity": "LOW CONFIDENCE: 64 GB HBM2e (reference/simulators.md §8)",
            "interconnect_bw": "LOW CONFIDENCE: HCCS 784 GB/s for 910C (two 910B dies; besthub.dev "
                               "Ascend roadmap article) -> 392 GB/s per 910B both ways, 196 each way",
            "compute_efficiency": f"assumption: A100-class prefill MFU 0.38 ({_BLIS})",
            "memory_efficiency": _ASSUMED_MEM,
            "interconnect_efficiency": _ASSUMED_IC,
        }),
)


def hardware_catalogue(path: str | os.PathLike[str] | None = None) -> dict[str, Hardware]:
    """The built-in entries by key, updated with the entries of a JSON file when given."""
    entries = {h.key: h for h in CATALOGUE}
    if path is not None:
        entries.update(load_hardware_file(path))
    return entries


def get_hardware(key_or_path: str | os.PathLike[str]) -> Hardware:
    """A catalogue entry by key, or an entry from a JSON file: `path.json` (one entry) or
    `path.json#key`. Raises ValueError listing the known keys when nothing matches."""
    text = os.fspath(key_or_path)
    known = hardware_catalogue()
    if text in known:
        return known[text]
    file_part, _, key = text.partition("#")
    if file_part.endswith(".json") or Path(file_part).is_file():
        return _pick(load_hardware_file(file_part), key, file_part)
    hint = (" A 'this machine' entry comes from calibration (CalibratedCostModel.fit on exec's "
            "step records), never from the catalogue." if text in CALIBRATED_KEYS else "")
    raise ValueError(f"unknown hardware {text!r}; known keys: {', '.join(sorted(known))}; "
                     f"or give a JSON file path (path.json or path.json#key).{hint}")


def _pick(entries: dict[str, Hardware], key: str, path: str) -> Hardware:
    if key:
        if key not in entries:
            raise ValueError(f"{path} has no entry {key!r}; it has {', '.join(sorted(entries))}")
        return entries[key]
    if len(entries) != 1:
        raise ValueError(f"{path} holds several entries ({', '.join(sorted(entries))}); "
                         f"pick one with {path}#key")
    return next(iter(entries.values()))


def load_hardware_file(path: str | os.PathLike[str]) -> dict[str, Hardware]:
    """The entries a JSON file defines, by key, each merged onto its base (see module doc).
    Raises ValueError naming the file and entry on malformed input."""
    data = _read_json(Path(path))
    builtin = {h.key: h for h in CATALOGUE}
    out: dict[str, Hardware] = {}
    for key, entry in data.items():
        try:
            out[key] = _entry(key, entry, {**builtin, **out}, str(path))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: entry {key!r}: {e}") from None
    return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"hardware file {path} does not exist") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"hardware file {path} is not valid JSON: {e}") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"hardware file {path} must be a non-empty JSON object of key -> entry")
    return data


def _entry(key: str, entry: Any, known: dict[str, Hardware], path: str) -> Hardware:
    if not isinstance(entry, dict):
        raise ValueError(f"must be a JSON object, got {type(entry).__name__}")
    allowed = {f.name for f in dataclasses.fields(Hardware)} - {"key"} | {"base"}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ValueError(f"unknown fields {unknown}; allowed: {', '.join(sorted(allowed))}")
    fields = {k: v for k, v in entry.items() if k not in ("base", "sources")}
    sources = entry.get("sources", {})
    if not isinstance(sources, dict):
        raise ValueError("sources must be an object of field -> source")
    base_key = entry.get("base", key if key in known else None)
    if base_key is None:
        required = [f.name for f in dataclasses.fields(Hardware)
                    if f.default is dataclasses.MISSING and f.name not in ("key", "name", "sources")]
        missing = [n for n in required if n not in fields]
        if missing:
            raise ValueError(f"missing fields {missing} (a new entry without a 'base' needs all)")
        return Hardware(key=key, **{"name": key, **fields}, sources=sources)
    if base_key not in known:
        raise ValueError(f"unknown base {base_key!r}; known keys: {', '.join(sorted(known))}")
    base = known[base_key]
    filled = {n: f"{path} (no source given)" for n in fields if n in NUMBER_FIELDS}
    merged_sources = {**dict(base.sources), **filled, **sources}
    return dataclasses.replace(base, key=key, sources=merged_sources, **fields)
