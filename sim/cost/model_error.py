"""`ModelError`: a cost model's measured error on the published calibration set
(`reference/published-calibration-set.md`), so a prediction can be shown with an honest band.

The numbers are what `python -m experiments.published_check` printed for the model (median
|error| and median signed error of predicted vs published, over the rows it could express);
they change only when someone reruns it and copies them here. `error_band(name)` returns
None for a cost model nobody has measured (a calibrated JSON, a custom CostModel).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

COMMAND = "python -m experiments.published_check"


@dataclass(frozen=True)
class ModelError:
    cost_model: str                  # "roofline", "kernel"
    median_abs_error_pct: float      # median |predicted - published| / published, percent
    median_signed_error_pct: float   # median (predicted - published) / published, percent
    rows_compared: int               # rows the check could express and ran
    rows_in_set: int                 # rows in the calibration set
    command: str = COMMAND           # what measured it
    provenance: str = ""             # when and at which commit (or what is still TODO)

    def band(self, value: float) -> tuple[float, float]:
        """(low, high): value -/+ the median |error|."""
        e = self.median_abs_error_pct / 100
        return value * (1 - e), value * (1 + e)

    def describe(self) -> str:
        """"±14.6%: the kernel cost model's median |error| on 52 published runs, <command>"."""
        return (f"±{self.median_abs_error_pct:.1f}%: the {self.cost_model} cost model's median "
                f"|error| on {self.rows_compared} published runs, {self.command}")


_MEASURED = "2026-12-05 at commit 84c76df, Intel Xeon 2-core host"
MODEL_ERRORS = MappingProxyType({
    "kernel": ModelError("kernel", 10.9, 1.1, 55, 58, provenance=_MEASURED),
    "roofline": ModelError("roofline", 17.2, -9.3, 42, 58,
                           command=f"{COMMAND} --cost-model roofline",
                           provenance=_MEASURED),
})
NO_BAND = "no measured error band for this cost model"


def error_band(cost_model_name: str | None) -> ModelError | None:
    """The measured error of a named cost model (None: the default, the roofline); None when
    there is none (a calibrated file, a custom model)."""
    return MODEL_ERRORS.get("roofline" if cost_model_name is None else str(cost_model_name))
