"""`TorchModelRunner`: one forward and its sampling (logits, penalties, sampler), CUDA graphs and compiled decode, the KV capacity, the TP runner and failure isolation of a runner call."""
