"""The built-in chips (`sim.hardware.lookup.hardware_catalogue` reads them): one row per chip,
each a file under `sim/hardware/chips/` whose `Hardware` entry holds the chip's datasheet
figures, kernel-model constants (or None: roofline-only) and node network, every number with
its source. The entry type, the JSON override format and the checks are in
`sim.hardware.hardware`. A new chip: its file, and its row here."""

from __future__ import annotations

from sim.hardware.chips.a100_80g import A100_80G
from sim.hardware.chips.ascend_910b import ASCEND_910B
from sim.hardware.chips.b200 import B200
from sim.hardware.chips.h100 import H100
from sim.hardware.chips.h200 import H200
from sim.hardware.chips.mi300x import MI300X
from sim.hardware.chips.mi325x import MI325X
from sim.hardware.chips.mi355x import MI355X

CATALOGUE = (A100_80G, H100, H200, B200, ASCEND_910B, MI300X, MI325X, MI355X)
