"""Checking where a command will write, before it does the work: a file's folder must exist,
and a results folder must not hold earlier results unless the user says `--overwrite`.

Each check raises ValueError naming the flag and the path (one line, exit 1).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def check_output_file(path: str | Path, flag: str) -> Path:
    """`path` as a file to write: its folder exists and it is not a folder itself."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give a file path")
    if not path.parent.is_dir():
        raise ValueError(f"{flag} {path}: folder {path.parent} does not exist")
    return path


def check_output_folder(path: str | Path, flag: str, overwrite: bool) -> Path:
    """`path` as a results folder: absent (it is created), empty, or with `overwrite` a folder
    of earlier results; never an existing file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path} exists and is not a folder")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise ValueError(f"{flag} {path} already holds files; pass --overwrite to replace the "
                         f"results in it, or choose another folder")
    return path


def remove_stale(folder: Path, names: Iterable[str]) -> None:
    """Delete the files `names` in `folder` that exist (earlier results this run may not
    rewrite), so that a folder written with --overwrite holds one run's results only."""
    for name in names:
        (folder / name).unlink(missing_ok=True)
