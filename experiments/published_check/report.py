"""The published-check report: one line per expressed row (published, predicted, signed
error), the median absolute error overall, per group, per half of the source split and per
engine profile, and every row the simulator cannot express with its reason."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from experiments.published_check.predict import Prediction
from experiments.published_check.row_spec import RowSpec, Unexpressed
from experiments.published_check.sources import half_of

GROUPS = ("offline throughput", "online throughput", "online TTFT", "TPOT/ITL",
          "batch-1 decode", "TP > 1", "MoE", "fp8", "2025-26 engines")
FAMILIES = ("dense", "MoE")
KINDS = ("online dense", "online MoE", "offline dense", "offline MoE", *FAMILIES)  # a plan's


def rows_frame(specs: Sequence[RowSpec], predictions: Sequence[Prediction]) -> pd.DataFrame:
    """One row per expressed measurement; `error_pct` = 100 * (predicted - published) / published."""
    by_id = {p.row_id: p for p in predictions}
    frame = pd.DataFrame([{"id": s.row_id, "source": s.source, "half": half_of(s.source),
                           "engine": engine_name(s), "groups": ", ".join(s.groups), "unit": s.unit,
                           "published": s.published, "predicted": by_id[s.row_id].predicted,
                           "assumptions": "; ".join(s.assumptions)} for s in specs])
    frame["error_pct"] = 100 * (frame["predicted"] - frame["published"]) / frame["published"]
    return frame


def engine_name(spec: RowSpec) -> str:
    """The engine profile a row runs on (the simulator's default, sglang, when none)."""
    profile = spec.sim_args.get("engine_profile") or "sglang"
    return profile if isinstance(profile, str) else profile.name


def summary_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Median |error| and signed median error (percent) overall, per group, per kind of run
    (online/offline, dense/MoE), per half and per engine profile."""
    parts = [("all", rows)] + [(f"group: {g}", rows[rows["groups"].str.contains(g, regex=False)])
                               for g in GROUPS]
    kinds = row_kinds(rows["groups"])
    parts += [(f"kind: {kind}", rows[(kinds == kind) | kinds.str.endswith(f" {kind}")
                                     if kind in FAMILIES else kinds == kind]) for kind in KINDS]
    parts += [(f"half {h}", rows[rows["half"] == h]) for h in sorted(rows["half"].unique())]
    parts += [(f"engine: {e}", rows[rows["engine"] == e]) for e in sorted(rows["engine"].unique())]
    return pd.DataFrame([{"set": name, "rows": len(part),
                          "median_abs_error_pct": part["error_pct"].abs().median(),
                          "median_signed_error_pct": part["error_pct"].median()}
                         for name, part in parts if len(part)])


def row_kinds(groups: pd.Series) -> pd.Series:
    """Each row's kind ("online dense", ...), from its groups; its family alone ("dense",
    "MoE") for a row that is neither online nor offline (a batch-1 decode)."""
    moe = groups.str.contains("MoE", regex=False).map({True: "MoE", False: "dense"})
    mode = groups.map(lambda g: "online" if "online" in g else "offline" if "offline" in g else "")
    return (mode + " " + moe).where(mode != "", moe)


def render(rows: pd.DataFrame, summary: pd.DataFrame, unexpressed: Sequence[Unexpressed],
           total: int) -> str:
    """The whole report as text."""
    shown = rows[["id", "source", "half", "groups", "published", "predicted", "unit", "error_pct"]]
    missing = "\n".join(f"  {u.row_id} ({u.source}): {u.reason}" for u in unexpressed)
    return "\n\n".join([
        shown.to_string(index=False, float_format=lambda v: f"{v:,.4g}"),
        summary.to_string(index=False, float_format=lambda v: f"{v:+.1f}"),
        f"expressed {len(rows)} of {total} rows ({100 * len(rows) / total:.1f}%); "
        f"not expressed ({len(unexpressed)}):\n{missing}"])
