"""A batch: `ScheduleBatch`, `ForwardMode`, the executor-neutral `ForwardBatch`, positions, logit rows, CUDA-graph padding and the attention layout."""
