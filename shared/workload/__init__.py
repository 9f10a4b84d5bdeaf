"""Workloads: `Workload` and its requests, length distributions and the generators."""
