"""batchtwin experiments: the `batchtwin` CLI, capacity planning, calibration, fidelity, benchmarks."""
