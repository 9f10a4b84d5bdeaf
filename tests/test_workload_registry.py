"""The workload generator registry (`shared.workload.registry.GENERATORS`): every entry is a
complete generator: the CLI builds it from its default flags, and the build is a non-empty
workload that the seed alone reproduces."""

from __future__ import annotations

import argparse
import dataclasses
import types

import pytest

from experiments.cli.workload_flags import make_workload, workload_arguments, workload_spec
from shared.workload.registry import GENERATORS

VOCAB = 1000


def _flags(name: str, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    workload_arguments(parser.add_argument_group())
    return parser.parse_args(["--workload", name, "--num-requests", "16", *extra])


def test_generators_is_a_read_only_table():
    assert isinstance(GENERATORS, types.MappingProxyType)
    with pytest.raises(TypeError):
        GENERATORS["new"] = object  # type: ignore[index]


@pytest.mark.parametrize("name", list(GENERATORS))
def test_every_generator_is_a_frozen_spec_with_cli_defaults(name):
    """A frozen dataclass with default lengths (prompt, output) and the two constructors the
    CLI uses: from_flags and build."""
    spec = GENERATORS[name]
    assert dataclasses.is_dataclass(spec) and spec.__dataclass_params__.frozen
    prompt, output = spec.DEFAULT_LENGTHS
    assert prompt > 0 and output > 0
    assert callable(spec.from_flags) and callable(spec.build)


@pytest.mark.parametrize("name", list(GENERATORS))
def test_every_generator_builds_a_non_empty_workload_from_its_defaults(name):
    w = make_workload(_flags(name), VOCAB)
    assert len(w) > 0 and w.config["seed"] == 0


@pytest.mark.parametrize("name", list(GENERATORS))
def test_every_generator_is_reproduced_by_its_seed(name):
    """Same flags and seed: an equal workload; another seed: other prompts."""
    spec = workload_spec(_flags(name))
    a, b = (spec.build(vocab_size=VOCAB, seed=3, rate=5.0) for _ in range(2))
    c = spec.build(vocab_size=VOCAB, seed=4, rate=5.0)
    assert a == b and list(a.followups) == list(b.followups)
    assert [r.input_ids for r in a] != [r.input_ids for r in c]


@pytest.mark.parametrize("name", list(GENERATORS))
def test_length_flags_override_the_generator_defaults(name):
    """--prompt-len / --output-len, when given, replace DEFAULT_LENGTHS."""
    default = workload_spec(_flags(name))
    given = workload_spec(_flags(name, "--prompt-len", "7", "--output-len", "3"))
    assert default != given
