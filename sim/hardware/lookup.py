"""Hardware by name: `get_hardware` reads a catalogue key (`sim.hardware.catalogue`) or a
hardware JSON file (one entry, or several keyed by name, each checked as `Hardware` checks
its fields; the format is in `sim.hardware.hardware`); `hardware_catalogue` lists the
built-in entries.

A JSON entry's "kernels" and "network" sections: an entry with a base inherits the base's,
and a section it gives is merged onto the base's field by field (a number changed without a
source is sourced to the file; `"kernels": null` drops them: roofline-only). An entry
without a base needs each section it gives whole; without "kernels" it is roofline-only,
without "network" it gets `DEFAULT_NETWORK`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from sim.hardware.catalogue import CATALOGUE
from sim.hardware.chip_kernels import ChipKernels
from sim.hardware.cluster_network import DEFAULT_NETWORK, NodeNetwork
from sim.hardware.hardware import CALIBRATED_KEYS, NUMBER_FIELDS, Hardware

SECTIONS = ("kernels", "network")


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
    builtin = hardware_catalogue()
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
        return _new_entry(key, fields, sources)
    if base_key not in known:
        raise ValueError(f"unknown base {base_key!r}; known keys: {', '.join(sorted(known))}")
    base = known[base_key]
    filled = {n: f"{path} (no source given)" for n in fields if n in NUMBER_FIELDS}
    merged_sources = {**dict(base.sources), **filled, **sources}
    if "network" in fields:
        fields["network"] = _network_onto(base.network, fields["network"], path)
    if fields.get("kernels") is not None and base.kernels is not None:
        fields["kernels"] = _kernels_onto(base.kernels, fields["kernels"], path)
    return dataclasses.replace(base, key=key, sources=merged_sources, **fields)


def _new_entry(key: str, fields: dict[str, Any], sources: dict[str, str]) -> Hardware:
    """An entry without a base: every number; roofline-only without "kernels", the default
    network without "network"."""
    required = [f.name for f in dataclasses.fields(Hardware) if f.default is dataclasses.MISSING
                and f.name not in ("key", "name", "sources", *SECTIONS)]
    missing = [n for n in required if n not in fields]
    if missing:
        raise ValueError(f"missing fields {missing} (a new entry without a 'base' needs all)")
    return Hardware(key=key, **{"name": key, "network": DEFAULT_NETWORK, "kernels": None,
                                **fields}, sources=sources)


def _network_onto(base: NodeNetwork, given: Any, path: str) -> Any:
    """The base's network with the fields `given` names (the file as source where a number
    changes without one)."""
    if not isinstance(given, dict):
        return given   # Hardware names the type it wants
    changed = {"gpus_per_node", "nic_bw"} & set(given)
    source = f"{path} (no source given)" if changed else base.source
    return {**base.to_dict(), "source": source, **given}


def _kernels_onto(base: ChipKernels, given: Any, path: str) -> Any:
    """The base's kernel constants with the fields `given` names, their sources merged as
    the entry's own are."""
    if not isinstance(given, dict):
        return given   # Hardware names the type it wants
    sources = given.get("sources", {})
    if not isinstance(sources, dict):
        raise ValueError("kernels.sources must be an object of field -> source")
    numbers = {k: v for k, v in given.items() if k != "sources"}
    filled = {n: f"{path} (no source given)" for n in numbers}
    return {**base.to_dict(), **numbers,
            "sources": {**dict(base.sources), **filled, **sources}}
