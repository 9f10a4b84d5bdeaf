"""Benchmarks (scripts run as `python -m experiments.bench.<name>`, never timed tests), the machine probes they report, and `batchtwin bench serve`."""
