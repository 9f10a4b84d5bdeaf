"""A package's public names imported on first use (PEP 562), so that `import shared` or
`import sim` costs nothing until a name is read. Each package's `__getattr__` and `__dir__`
call these with its own EXPORTS (name -> module)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def export(package: str, exports: Mapping[str, str], name: str) -> Any:
    """`package`'s public `name`, imported from its module; AttributeError for any other."""
    if name not in exports:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return getattr(importlib.import_module(exports[name]), name)


def exported_names(names: Mapping[str, Any], exports: Mapping[str, str]) -> list[str]:
    """`dir()` of a package whose globals are `names`: those and its exports."""
    return sorted({*names, *exports})
