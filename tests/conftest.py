"""Hypothesis profiles: `ci` (the default) and `thorough`, chosen by HYPOTHESIS_PROFILE."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    max_examples=100,
    stateful_step_count=30,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=2000,
    stateful_step_count=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """`tiny_checkpoint(arch)` -> (folder, transformers model), built once per session."""
    from tests.tiny_models import make_checkpoint

    cache = {}

    def get(arch: str = "llama"):
        if arch not in cache:
            folder = tmp_path_factory.mktemp(f"tiny-{arch}")
            cache[arch] = (folder, make_checkpoint(folder, arch))
        return cache[arch]

    return get
