"""The tiny transformers checkpoints of the tests (`make_checkpoint`, `hf_logits`, `COMMON`):
they live in `experiments.dev.tiny_models`, shared with `experiments.dev.mutation_check`."""

from experiments.dev.tiny_models import ARCHS, COMMON, LLAMA3_ROPE, hf_logits, make_checkpoint

__all__ = ["ARCHS", "COMMON", "LLAMA3_ROPE", "hf_logits", "make_checkpoint"]
