"""`ModelError`: a cost model's measured error on the published calibration set
(`reference/published-calibration-set.md`), so a prediction can be shown with an honest band.

The numbers are what `python -m experiments.published_check` printed for the model (median
|error| and median signed error of predicted vs published, over the rows it could express);
they change only when someone reruns it and copies them here. `error_band(name)` returns
None for a cost model nobody has measured (a calibrated JSON, a custom CostModel).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType

from sim.cost.registry import DEFAULT_COST_MODEL

COMMAND = "python -m experiments.published_check"
MIN_KIND_ROWS = 3   # fewer rows of a kind: the band of every row


@dataclass(frozen=True)
class ModelError:
    cost_model: str                  # "roofline", "kernel"
    median_abs_error_pct: float      # median |predicted - published| / published, percent
    median_signed_error_pct: float   # median (predicted - published) / published, percent
    rows_compared: int               # rows the check could express and ran
    rows_in_set: int                 # rows in the calibration set
    command: str = COMMAND           # what measured it
    provenance: str = ""             # when and at which commit (or what is still TODO)
    kinds: tuple[tuple[str, float, float, int], ...] = ()  # (kind, |error| %, signed %, rows)
    kind: str = ""                   # the kind of run these numbers are of ("": every row)

    def of_kind(self, kind: str | None) -> ModelError:
        """These numbers on the rows of `kind` ("online dense", ...: the published check's
        `kind:` lines) where at least MIN_KIND_ROWS were measured, else on the rows of its
        family ("dense", "MoE"), else on every row."""
        family = (kind or "").split(" ")[-1]
        for wanted in (kind, family):
            for name, error, signed, rows in self.kinds:
                if name == wanted and rows >= MIN_KIND_ROWS:
                    return dataclasses.replace(self, median_abs_error_pct=error,
                                               median_signed_error_pct=signed,
                                               rows_compared=rows, kinds=(), kind=name)
        return self

    def band(self, value: float) -> tuple[float, float]:
        """(low, high): value -/+ the median |error|."""
        e = self.median_abs_error_pct / 100
        return value * (1 - e), value * (1 + e)

    def describe(self) -> str:
        """"±14.6%: the kernel cost model's median |error| on 52 published runs, <command>"."""
        runs = f"{self.kind} runs" if self.kind else "runs"
        return (f"±{self.median_abs_error_pct:.1f}%: the {self.cost_model} cost model's median "
                f"|error| on {self.rows_compared} published {runs}, {self.command}")


_MEASURED = "2026-12-05 at commit 84c76df, Intel Xeon 2-core host"
_KINDS_MEASURED = "2026-12-05, main after 1288807 (the kind lines), Intel Xeon 2-core host"
_KERNEL_MEASURED = ("2026-12-06, main at aef7318+ (expert_compute_efficiency 0.7; the MLPerf "
                    "gpt-oss rows expressed), the 103-row set (the team's 58 and the 45 2025-26 "
                    "rows of experiments/published_check/data), Intel Xeon 2-core host")
MODEL_ERRORS = MappingProxyType({
    "kernel": ModelError("kernel", 11.2, 2.8, 94, 103, provenance=_KERNEL_MEASURED,
                         kinds=(("online dense", 7.6, 2.4, 6), ("online MoE", 21.0, -8.0, 8),
                                ("offline dense", 10.7, 6.2, 36), ("offline MoE", 13.8, 3.5, 26),
                                ("dense", 10.2, 3.3, 50), ("MoE", 21.1, -0.1, 44))),
    "roofline": ModelError("roofline", 17.2, -9.3, 42, 58,   # NOTE: the first 58 rows
                           command=f"{COMMAND} --cost-model roofline",
                           provenance=f"{_MEASURED}; {_KINDS_MEASURED}",
                           kinds=(("online dense", 40.4, 40.4, 5), ("online MoE", 0.4, 0.4, 1),
                                  ("offline dense", 16.9, -16.0, 24),
                                  ("offline MoE", 17.6, 17.6, 6), ("dense", 17.8, -12.9, 35),
                                  ("MoE", 16.6, 16.6, 7))),
})
NO_BAND = "no measured error band for this cost model"


def error_band(cost_model_name: str | None, kind: str | None = None) -> ModelError | None:
    """The measured error of a named cost model (None: the default, the kernel model) on
    runs of `kind` ("online dense", ...; `ModelError.of_kind`); None when there is none (a
    calibrated file, a custom model)."""
    error = MODEL_ERRORS.get(DEFAULT_COST_MODEL if cost_model_name is None else str(cost_model_name))
    return None if error is None else error.of_kind(kind)
