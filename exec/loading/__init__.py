"""Loading a model: safetensors and GGUF weights, tokenizers, fp8 weights and chat templates."""
