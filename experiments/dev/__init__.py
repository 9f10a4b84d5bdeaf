"""Developer tools, run from the repository root and left out of the installed package:
`python -m experiments.dev.mutation_check` (do the agreement tests catch planted defects?)
and `python -m experiments.dev.gpu_check` (the CUDA tests and benchmark in one go); and the
agreement harness mutation_check shares with tests/test_agreement*.py (`tiny_models`,
`tiny_exec`, `lockstep_machine`), so that nothing here imports tests/."""
