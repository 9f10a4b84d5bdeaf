"""Workloads: `Workload` and its requests (`workload`), arrivals, length distributions, and
the generators, one frozen spec per file, named in `registry.GENERATORS`."""
