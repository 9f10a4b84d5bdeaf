"""A lean run's summary against the full trace's: ITL percentiles within the sketch's
stated accuracy, the mean to rounding, every other value identical."""

from __future__ import annotations

import math

from shared.trace.token_gaps import SKETCH_ACCURACY


def assert_summary_matches_within_the_sketch(lean: dict, full: dict) -> None:
    for key, exact in full.items():
        if key.startswith("itl_p"):
            assert abs(lean[key] - exact) <= 1.001 * SKETCH_ACCURACY * exact, key
        elif key == "itl_mean":
            assert math.isclose(lean[key], exact, rel_tol=1e-9)
        else:
            assert lean[key] == exact or (math.isnan(exact) and math.isnan(lean[key])), key
