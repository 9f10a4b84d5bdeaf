"""Workloads: `Workload` and its requests (`workload`; a generator's made on access:
`generated_requests`), arrivals, length distributions, and the generators, one frozen spec
per file, named in `registry.GENERATORS`."""
