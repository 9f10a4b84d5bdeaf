"""`python -m experiments.published_check`: the simulator against published measurements
(`../shared/reference/published-calibration-set.csv`), row by row."""
