"""The folder layout's rules, checked by parsing the source with `ast` (nothing is imported).

Each folder of shared/, sim/ and exec/ is one concept; FOLDER_IMPORTS writes down, per folder
(or per file, where one file of a folder may import more: a registry), the folders of its own
package its modules may import (any shared/ folder is the spec below
sim/ and exec/, so it is always allowed there; tests/test_layering.py holds the package
rules). A package's `__init__.py` is its public face and may import its whole package.
experiments/cli/ is the plumbing every command uses: it imports no command and not the
entry point (experiments/main.py, the command table). No folder holds more than MAX_MODULES
modules, and no two files import each other, directly or around a circle (imports under
TYPE_CHECKING and inside functions count: a circle is a circle) but the KNOWN_CIRCLES left
to cut.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("shared", "sim", "exec", "experiments")
MAX_MODULES = 15

FOLDER_IMPORTS: dict[str, set[str]] = {
    # shared/: the spec, in ARCHITECTURE §3's stages
    "shared/config": set(),
    "shared/request": set(),
    "shared/memory": {"shared/request"},
    "shared/batch": {"shared/config", "shared/memory", "shared/request"},
    "shared/admission": {"shared/batch", "shared/config", "shared/memory", "shared/request"},
    "shared/trace": {"shared/config", "shared/request"},
    "shared/loop": {"shared/admission", "shared/batch", "shared/config", "shared/memory",
                    "shared/request", "shared/trace"},
    "shared/workload": {"shared/request"},
    "shared/online": {"shared/loop", "shared/request", "shared/trace"},   # the admission turn
    # sim/: chips and models below the cost models, one engine's run above them, fleets on top
    "sim/hardware": {"sim/hardware/chips"},   # the catalogue collects the chips' files
    "sim/hardware/chips": {"sim/hardware"},   # a chip's entry is built of the entry types
    "sim/model": {"sim/hardware"},
    "sim/cost": {"sim/hardware", "sim/model"},
    "sim/cost/kernel": {"sim/cost", "sim/hardware", "sim/model"},
    "sim/cost/roofline": {"sim/cost", "sim/cost/kernel", "sim/hardware", "sim/model"},
    # NOTE: a file row overrides its folder's: the cost-model registry names every model
    "sim/cost/registry.py": {"sim/cost/kernel", "sim/cost/roofline", "sim/hardware", "sim/model"},
    "sim/routers": set(),
    "sim/run": {"sim/cost", "sim/cost/kernel", "sim/cost/roofline", "sim/hardware", "sim/model"},
    "sim/fleet": {"sim/run", "sim/routers", "sim/cost", "sim/hardware", "sim/model"},
    "sim/conformance": {"sim/run", "sim/cost"},
    # exec/: torch settings and the KV pool below layers, models, loaders, the runner, the engine
    "exec/device": set(),
    "exec/memory": set(),
    "exec/distributed": set(),
    "exec/layers": {"exec/distributed"},
    "exec/models": {"exec/layers", "exec/memory", "exec/distributed"},
    "exec/loading": {"exec/models", "exec/layers", "exec/device"},
    "exec/runner": {"exec/models", "exec/layers", "exec/memory", "exec/distributed", "exec/device"},
    "exec/engine": {"exec/runner", "exec/loading", "exec/memory", "exec/distributed",
                    "exec/device"},
}
ENTRY_POINT = "experiments/main.py"
# NOTE: a ratchet: the circles still to cut, each with what cuts it. The test fails on any
# other circle, and on one listed here that is gone (then delete its row).
KNOWN_CIRCLES: frozenset[tuple[str, ...]] = frozenset()


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the four packages."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imported_files(path: Path, known: dict[str, Path]) -> set[Path]:
    """The files of the four packages that `path` imports, anywhere in it (the longest
    module a dotted name resolves to; `from pkg import sub` counts `pkg/sub.py`)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    files = set()
    for name in names:
        parts = name.split(".")
        while parts and ".".join(parts) not in known:
            parts.pop()
        if parts and parts[0] in PACKAGES:
            files.add(known[".".join(parts)])
    files.discard(path)
    return files


def import_graph() -> dict[Path, set[Path]]:
    known = modules()
    return {path: imported_files(path, known) for path in known.values()}


def folder(path: Path) -> str:
    return path.parent.relative_to(ROOT).as_posix()


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def folder_violations(graph: dict[Path, set[Path]]) -> list[str]:
    """Imports from a ruled folder into a folder of its own package it may not import."""
    bad = []
    for path, targets in graph.items():
        rules = FOLDER_IMPORTS.get(rel(path), FOLDER_IMPORTS.get(folder(path)))
        if rules is None or (path.name == "__init__.py" and folder(path) in PACKAGES):
            continue
        package = folder(path).split("/")[0]
        for target in targets:
            where = folder(target)
            if where != folder(path) and where.split("/")[0] == package and where not in rules:
                bad.append(f"{rel(path)} imports {rel(target)} ({folder(path)} may import "
                           f"{sorted(rules) or 'nothing else of ' + package})")
    return bad


def circles(graph: dict[Path, set[Path]]) -> list[list[str]]:
    """Strongly connected groups of more than one file (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(rel(p) for p in group))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(graph.get(child, ()))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


GRAPH = import_graph()
FOLDERS = sorted({folder(p) for p in GRAPH})


def test_every_folder_of_shared_sim_and_exec_has_its_allowed_imports_written_down():
    """A new folder gets a row in FOLDER_IMPORTS; a removed one loses it."""
    ruled = {f for f in FOLDERS if f.split("/")[0] in ("shared", "sim", "exec")
             and f not in ("shared", "sim", "exec")}
    assert ruled == {key for key in FOLDER_IMPORTS if not key.endswith(".py")}


def test_each_folder_imports_only_the_folders_its_rule_allows():
    assert folder_violations(GRAPH) == []


def test_a_forbidden_import_between_folders_is_reported():
    """The check can fail: shared/request importing shared/loop breaks its rule."""
    request, loop = ROOT / "shared/request/req.py", ROOT / "shared/loop/scheduler.py"
    assert folder_violations({request: {loop}}) == [
        "shared/request/req.py imports shared/loop/scheduler.py "
        "(shared/request may import nothing else of shared)"]


def test_no_file_imports_another_that_imports_it_back_around_a_circle():
    assert {tuple(c) for c in circles(GRAPH)} == KNOWN_CIRCLES


def test_a_circle_of_imports_is_found():
    a, b, c = (ROOT / f"sim/run/{n}.py" for n in "abc")
    assert circles({a: {b}, b: {c}, c: {a}}) == [sorted(rel(p) for p in (a, b, c))]


def test_the_cli_plumbing_imports_no_command_and_not_the_entry_point():
    assert (ROOT / ENTRY_POINT).exists()
    bad = [f"{rel(p)} imports {rel(t)}" for p, targets in GRAPH.items() for t in targets
           if folder(p) == "experiments/cli" and folder(t) != "experiments/cli"
           and folder(t).startswith("experiments")]
    assert bad == []


@pytest.mark.parametrize("where", FOLDERS)
def test_no_folder_holds_more_than_fifteen_modules(where):
    assert len(list((ROOT / where).glob("*.py"))) <= MAX_MODULES
