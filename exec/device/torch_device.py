"""`checked_device(name)`: a device name as a torch.device this machine has, checked before
anything is loaded onto it (torch itself fails late: an unknown name raises a RuntimeError
listing every backend torch knows, and `cuda` without CUDA an AssertionError at the first
tensor)."""

from __future__ import annotations

import torch

SUPPORTED = "cpu, cuda, cuda:N or mps"


def checked_device(name: str | torch.device) -> torch.device:
    """`name` as a torch.device; ValueError naming it when torch does not know it, batchtwin
    does not run on it, or this machine does not have it."""
    device = name if isinstance(name, torch.device) else _parse(name)
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        _check_cuda(name, device)
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {str(name)!r} is not available: this machine has no MPS GPU")
    else:
        raise ValueError(f"device {str(name)!r} is not supported; use {SUPPORTED}")
    return device


def _parse(name: str) -> torch.device:
    try:
        return torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {name!r}; use {SUPPORTED}") from None


def _check_cuda(name: str | torch.device, device: torch.device) -> None:
    if not torch.cuda.is_available():
        why = ("this torch build has no CUDA support" if torch.version.cuda is None
               else "no CUDA GPU is visible")
        raise ValueError(f"device {str(name)!r} is not available: {why} (torch {torch.__version__})")
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ValueError(f"device {str(name)!r} is not available: this machine has {count} "
                         f"CUDA device(s)")
