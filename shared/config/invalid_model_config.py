"""`InvalidModelConfig` and the checked read of a positive size, shared by the config.json
readers (`shared.config.hf_config`, `shared.config.moe_config`, `shared.config.mla_config`, `shared.config.quant_config`)."""

from __future__ import annotations

from typing import Any


class InvalidModelConfig(ValueError):
    """config.json lacks a required key or holds an inconsistent value."""


def positive(d: dict[str, Any], key: str, default: int | None = None) -> int:
    """d[key] as a positive int; a missing (or null) key is `default`, or an error without one."""
    value = d.get(key)
    if value is None:
        if default is None:
            raise InvalidModelConfig(f"config.json has no {key!r}")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidModelConfig(f"{key} must be a positive integer, got {value!r}")
    return value
