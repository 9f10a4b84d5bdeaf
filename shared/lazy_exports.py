"""`lazy_exports`: a package's public names imported on first use (PEP 562), so that
`import shared` or `import sim` costs nothing until a name is read."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], names: dict[str, Any]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(`__getattr__`, `__dir__`) of `package`: each public name of `exports` (name ->
    module) imported from its module when read; `names`: the package's globals()."""
    def getattr_(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name]), name)

    def dir_() -> list[str]:
        return sorted({*names, *exports})

    return getattr_, dir_
