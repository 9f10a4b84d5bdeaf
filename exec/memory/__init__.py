"""The paged KV cache's tensors (`KVPool`) and its dtype."""
