"""Tensor parallelism's process group and the launch of its ranks."""
