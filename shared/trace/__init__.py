"""What a run leaves: `StepRecord`, `Trace` with its `RequestRecord`s, and `RunResult` with its metrics."""
