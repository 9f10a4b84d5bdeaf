"""Packaging: the planner and the simulator run without the exec extra (torch and friends made
unimportable in a fresh interpreter); the torch commands then exit 1 with a one-line install
hint; the base dependencies hold no torch; the developer tools stay out of the package."""

import subprocess
import sys
from pathlib import Path

import pytest

from experiments.cli.exec_extra import EXEC_MODULES, INSTALL, needs_exec

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = (*sorted(EXEC_MODULES), "transformers")
# Runs `batchtwin ARGS` with every BLOCKED package unimportable, as if never installed.
PRELUDE = f"""
import sys

class NoExecExtra:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NoExecExtra())
from experiments.main import main
sys.exit(main(sys.argv[1:]))
"""
PLAN = ["plan", "--model", "smollm2-135m", "--workload", "synthetic", "--prompt-len", "64",
        "--output-len", "16", "--num-requests", "40", "--seeds", "1", "--rate-tolerance", "0.2",
        "--chunked-prefill-size", "512", "--max-running-requests", "8,auto", "--jobs", "1",
        "--no-progress", "--slo", "ttft_p90=50ms,tpot_p90=4ms"]
SIMULATE = ["simulate", "--model", "smollm2-135m", "--num-requests", "8", "--rate", "50",
            "--prompt-len", "32", "--output-len", "8", "--no-progress"]


def without_exec(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PRELUDE, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_plan_simulate_and_replay_run_without_torch(tmp_path):
    """A reduced `plan`, a small `simulate --save-trace` and a `replay` of its trace exit 0
    with torch, tokenizers, safetensors, gguf, jinja2 and transformers unimportable."""
    plan = without_exec(*PLAN, "--out", str(tmp_path / "plan"))
    assert plan.returncode == 0, plan.stderr
    assert "best: " in plan.stdout and (tmp_path / "plan" / "report.md").is_file()
    sim = without_exec(*SIMULATE, "--out", str(tmp_path / "sim"), "--save-trace")
    assert sim.returncode == 0, sim.stderr
    assert "completed 8" in sim.stdout
    replay = without_exec("replay", str(tmp_path / "sim" / "trace.jsonl"), "--no-plot")
    assert replay.returncode == 0, replay.stderr


def test_explain_sim_only_runs_without_torch():
    """`explain --sim-only` prints the simulator's three steps of the golden example, no torch."""
    done = without_exec("explain", "--sim-only")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("field ") == 3 and "[11,12,13,14,15,16,24,25,26]" in done.stdout


@pytest.mark.parametrize("args", [["generate", "hi"], ["explain"], ["calibrate"], ["fidelity"]],
                         ids=lambda a: a[0])
def test_torch_commands_without_torch_exit_1_with_a_one_line_install_hint(args, tmp_path):
    """`generate`, `explain`, `calibrate` and `fidelity` without the exec extra: exit 1, one
    stderr line naming the extra and the pip command, no traceback."""
    out = ["--out", str(tmp_path / "out")] if args[0] in ("calibrate", "fidelity") else []
    done = without_exec(*args, *out)
    assert done.returncode == 1
    assert done.stderr.startswith(f"batchtwin {args[0]} needs the exec extra: {INSTALL}")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_a_missing_module_outside_the_extra_is_not_hidden():
    """needs_exec turns only exec-extra modules into the hint; any other missing module raises."""
    def run(_args):
        raise ModuleNotFoundError("No module named 'nosuchthing'", name="nosuchthing")

    with pytest.raises(ModuleNotFoundError):
        needs_exec("generate", run)(None)


def test_base_dependencies_leave_torch_to_the_exec_extra():
    """[project] dependencies name none of the exec extra; `exec` does; `test` pulls `exec` in."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {_name(d) for d in project["dependencies"]}
    extras = project["optional-dependencies"]
    assert names.isdisjoint(EXEC_MODULES)
    assert {_name(d) for d in extras["exec"]} == EXEC_MODULES
    assert "batchtwin[exec]" in extras["test"]


def test_developer_tools_are_left_out_of_the_package():
    """The packages setuptools installs include experiments but not experiments.dev."""
    tomllib = pytest.importorskip("tomllib")
    setuptools = pytest.importorskip("setuptools")
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = setuptools.find_packages(str(ROOT), include=find["include"], exclude=find["exclude"])
    assert "experiments" in packages and (ROOT / "experiments" / "dev" / "mutation_check.py").is_file()
    assert not [p for p in packages if p.startswith("experiments.dev")]


def _name(requirement: str) -> str:
    return requirement.split(">")[0].split("=")[0].split("[")[0].strip().lower()
