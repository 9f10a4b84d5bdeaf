"""Model-independent layers: paged attention, rotary embeddings, tensor-parallel and packed linear layers, fused MoE experts."""
