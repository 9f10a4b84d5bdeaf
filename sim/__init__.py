"""batchtwin's SimPy cost-model executor: replays the spec's batches and prices each one."""
