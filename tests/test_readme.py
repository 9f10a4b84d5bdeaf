"""The README's code runs as written (a new user copies it first)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks(marker: str) -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    return [b for b in blocks if marker in b]


def test_the_readme_spec_driver_snippet_runs_as_written(tmp_path, monkeypatch):
    """The 'A driver runs the spec like this' block defines everything it uses and serves
    its request to the end, writing its trace."""
    (block,) = _python_blocks("sched.get_next_batch_to_run(now)")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    assert scope["sched"].trace.requests["a"].output_len == 8
    assert (tmp_path / "run.jsonl").exists()
