"""Architecture rules, checked by parsing the source with `ast` (nothing is imported).

shared/ is pure Python + numpy with no mutable module state; exec/ and sim/ never import
each other; nothing below experiments/ imports it; nothing outside tests/ imports tests/.
"""

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_ALLOWED = set(sys.stdlib_module_names) | {"numpy", "shared", "__future__"}
SHARED_FUNCTION_ONLY = {"pandas"}
NEVER_IN_SHARED = {"torch", "simpy", "exec", "sim", "experiments"}
EXECUTOR_FORBIDDEN = {"exec": {"sim", "experiments"}, "sim": {"exec", "experiments"}}
CONSTANT_NAME = re.compile(r"_?[A-Z][A-Z0-9_]*|__all__")
MUTABLE_NODES = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
MUTABLE_CALLS = {"list", "dict", "set", "bytearray", "deque", "defaultdict", "OrderedDict", "Counter"}
# An immutable type alias (`FinishType = Literal[...]`) is not state; only these generic
# bases make a CapWords module-level name a type alias.
TYPE_ALIAS_BASES = {"Literal", "Union", "Optional", "Callable", "Annotated", "tuple", "frozenset", "type"}


def py_files(package):
    return sorted((ROOT / package).rglob("*.py"))


def rel(path):
    return path.relative_to(ROOT).as_posix()


def imports(tree, module_parts):
    """Yield (top-level package, lineno, inside a function body) for every import in `tree`."""
    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name.split(".")[0], child.lineno, in_function
            elif isinstance(child, ast.ImportFrom):
                if child.level:  # relative: resolve against the importing module's package
                    base = module_parts[: len(module_parts) - child.level]
                    name = ".".join([*base, child.module or ""]).strip(".")
                else:
                    name = child.module or ""
                yield name.split(".")[0], child.lineno, in_function
            elif (isinstance(child, ast.Call) and isinstance(child.func, (ast.Name, ast.Attribute))
                  and getattr(child.func, "id", getattr(child.func, "attr", "")) in {"import_module", "__import__"}
                  and child.args and isinstance(child.args[0], ast.Constant)
                  and isinstance(child.args[0].value, str)):
                yield child.args[0].value.split(".")[0], child.lineno, in_function
            yield from visit(child, nested)

    yield from visit(tree, False)


def module_parts(path):
    """Dotted-name parts; a package's `__init__` stays as a last part so `level` strips it."""
    return list(path.relative_to(ROOT).with_suffix("").parts)


def shared_import_violations(source, parts=("shared", "mod")):
    """Imports a shared/ module may not make (module level: stdlib/numpy/shared only; pandas in functions)."""
    bad = []
    for top, line, in_function in imports(ast.parse(source), list(parts)):
        allowed = SHARED_ALLOWED | (SHARED_FUNCTION_ONLY if in_function else set())
        if top in NEVER_IN_SHARED or top not in allowed:
            bad.append(f"line {line}: import {top}" + (" (in function)" if in_function else ""))
    return bad


def module_level_statements(body):
    """Statements executed at import time, descending into if/try/with/for but not defs."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for block in ("body", "orelse", "finalbody"):
            yield from module_level_statements(getattr(stmt, block, []))
        for handler in getattr(stmt, "handlers", []):
            yield from module_level_statements(handler.body)


def target_names(target):
    if isinstance(target, ast.Name):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from target_names(elt)
    elif isinstance(target, ast.Starred):
        yield from target_names(target.value)
    else:  # attribute or subscript assignment at module level mutates something
        yield target


def is_type_alias(stmt):
    if isinstance(stmt, ast.AnnAssign) and "TypeAlias" in ast.unparse(stmt.annotation):
        return True
    value = stmt.value
    base = value.value if isinstance(value, ast.Subscript) else None
    name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
    return name in TYPE_ALIAS_BASES


def is_mutable_value(value):
    if isinstance(value, MUTABLE_NODES):
        return True
    func = value.func if isinstance(value, ast.Call) else None
    return (getattr(func, "id", None) or getattr(func, "attr", None)) in MUTABLE_CALLS


def mutable_state_violations(source):
    """Module-level names that are not UPPER_CASE constants, and mutable class-level attributes."""
    tree, bad = ast.parse(source), []
    for stmt in module_level_statements(tree.body):
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for node in (n for t in targets for n in target_names(t)):
                name = getattr(node, "id", None)
                if isinstance(stmt, ast.AugAssign) or name is None:
                    bad.append(f"line {stmt.lineno}: module-level mutation of {ast.unparse(node)}")
                elif not CONSTANT_NAME.fullmatch(name) and not (name[0].isupper() and is_type_alias(stmt)):
                    bad.append(f"line {stmt.lineno}: module-level name {name!r} is not UPPER_CASE")
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None \
                    and is_mutable_value(stmt.value):
                bad.append(f"line {stmt.lineno}: class {cls.name} holds a mutable class attribute")
    return bad


@pytest.mark.parametrize("path", py_files("shared"), ids=rel)
def test_shared_imports_only_stdlib_numpy_and_shared(path):
    """shared/ imports only stdlib, numpy, shared (pandas only inside functions); never torch/simpy/exec/sim/experiments."""
    assert shared_import_violations(path.read_text(), module_parts(path)) == []


@pytest.mark.parametrize("package", sorted(EXECUTOR_FORBIDDEN))
def test_executors_do_not_import_each_other_or_experiments(package):
    """exec/ never imports sim, sim/ never imports exec, and neither imports experiments."""
    files = py_files(package)
    assert files, f"{package}/ has no Python files"
    bad = [f"{rel(path)}:{line}: import {top}"
           for path in files
           for top, line, _ in imports(ast.parse(path.read_text()), module_parts(path))
           if top in EXECUTOR_FORBIDDEN[package]]
    assert bad == []


# Every package of the repository but tests/ (the developer tools in experiments/dev included).
NOT_TESTS = ("shared", "sim", "exec", "experiments")


def imports_of_the_tests(source, parts=("experiments", "dev", "mod")):
    """Imports of tests/ (at any level, relative or by importlib) a module outside tests/ makes."""
    return [f"line {line}: import {top}" + (" (in function)" if in_function else "")
            for top, line, in_function in imports(ast.parse(source), list(parts))
            if top == "tests"]


def test_every_package_outside_tests_is_checked():
    """NOT_TESTS lists every top-level package of the repository except tests/."""
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} - {"tests"}
    assert packages == set(NOT_TESTS)
    assert not list(ROOT.glob("*.py")), "a top-level module escapes the layering rules"


@pytest.mark.parametrize("package", NOT_TESTS)
def test_nothing_outside_tests_imports_the_tests(package):
    """No module outside tests/ imports tests/: not the installed package, not the developer
    tools in experiments/dev (what both need lives in the packages; tests import it)."""
    bad = [f"{rel(path)}: {v}"
           for path in py_files(package)
           for v in imports_of_the_tests(path.read_text(), module_parts(path))]
    assert bad == []


@pytest.mark.parametrize("path", py_files("shared"), ids=rel)
def test_shared_has_no_mutable_module_or_class_state(path):
    """shared/ module-level names are UPPER_CASE constants and no class body holds a list/dict/set."""
    assert mutable_state_violations(path.read_text()) == []


VIOLATIONS = [
    (shared_import_violations, "import torch\n"),
    (shared_import_violations, "import pandas\n"),
    (shared_import_violations, "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pandas\n"),
    (shared_import_violations, "def f():\n    import simpy\n"),
    (shared_import_violations, "from ..sim import engine\n"),
    (shared_import_violations, "import importlib\nX = importlib.import_module('torch.nn')\n"),
    (mutable_state_violations, "cache = {}\n"),
    (mutable_state_violations, "Registry = dict()\n"),
    (mutable_state_violations, "try:\n    counter = 0\nexcept ImportError:\n    pass\n"),
    (mutable_state_violations, "class A:\n    items = []\n"),
    (mutable_state_violations, "class A:\n    seen = {k for k in 'ab'}\n"),
    (mutable_state_violations, "REGISTRY = {}\nREGISTRY['x'] = 1\n"),
    (imports_of_the_tests, "from tests.tiny_models import COMMON\n"),
    (imports_of_the_tests, "import tests.test_agreement as agreement\n"),
    (imports_of_the_tests, "def f():\n    from tests import conftest\n"),
    (imports_of_the_tests, "from ...tests import tiny_models\n"),
    (imports_of_the_tests, "import importlib\nM = importlib.import_module('tests.tiny_models')\n"),
]
CLEAN = [
    (shared_import_violations, "from __future__ import annotations\nimport heapq\nimport numpy as np\n"
                               "from shared.request.req import Req\nfrom . import radix_cache\n"),
    (shared_import_violations, "def to_frame():\n    import pandas as pd\n    return pd\n"),
    (mutable_state_violations, "_CHECKS = (1, 2)\n__all__ = ['A']\nKind = Literal['a', 'b']\n"
                               "@dataclass\nclass A:\n    xs: list = field(default_factory=list)\n"),
    (imports_of_the_tests, "from experiments.dev.tiny_models import COMMON\nimport testsuite\n"
                           "from . import tiny_exec\n"),
]


@pytest.mark.parametrize(("checker", "source"), VIOLATIONS)
def test_checker_catches_planted_violation(checker, source):
    """The checkers flag a known violation, so the rules above can fail."""
    assert checker(source) != []


@pytest.mark.parametrize(("checker", "source"), CLEAN)
def test_checker_accepts_allowed_patterns(checker, source):
    """The checkers accept what the rules allow (function-level pandas, constants, default_factory)."""
    assert checker(source) == []
