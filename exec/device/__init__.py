"""Torch's device, dtype and thread settings, by name."""
