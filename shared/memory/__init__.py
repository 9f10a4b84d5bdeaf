"""KV memory: the request-to-token pool, the token allocator, and the prefix caches (radix and chunk) behind one `KVMemory`."""
