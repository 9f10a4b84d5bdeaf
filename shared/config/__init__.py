"""Configs: `EngineConfig`, the Hugging Face config reader and its MoE, MLA and quantization parts, the KV cache layout."""
