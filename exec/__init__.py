"""batchtwin's real executor: Llama-family PyTorch models on a paged KV cache."""
