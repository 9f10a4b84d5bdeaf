"""`batchtwin bench serve --dataset-name`'s prompts: each dataset's token lengths, output
lengths and sharing survive the trip into text."""

from __future__ import annotations

import pytest

from experiments.bench.bench_datasets import dataset_requests
from experiments.main import build_parser
from experiments.serve.text_codec import PlaceholderCodec
from shared.workload.sharegpt import ShareGPTLike
from shared.workload.synthetic import Synthetic

CODEC = PlaceholderCodec(128256)


def _sent(*flags: str):
    return dataset_requests(build_parser().parse_args(
        ["bench", "serve", "--base-url", "http://x", "--model", "m", "--seed", "3", *flags]))


@pytest.mark.parametrize("name", ["random", "sharegpt-like"])
def test_each_prompt_is_as_many_placeholder_tokens_as_its_workload_request(name):
    """Prompt i encodes to exactly the token count of the workload's request i, and asks for
    its output length; the send times are the workload's arrivals."""
    sent = _sent("--dataset-name", name, "--num-prompts", "40", "--request-rate", "5",
                 "--random-input-len", "33", "--random-output-len", "9")
    w = (Synthetic(40, 33, 9).build(vocab_size=26 ** 3, seed=3, rate=5.0) if name == "random"
         else ShareGPTLike(40).build(vocab_size=26 ** 3, seed=3, rate=5.0))
    assert [len(CODEC.encode(s.prompt)) for s in sent] == [len(r.input_ids) for r in w]
    assert [s.max_tokens for s in sent] == [r.sampling_params.max_new_tokens for r in w]
    assert [s.delay for s in sent] == pytest.approx([r.arrival_time for r in w])


def test_shared_prefix_prompts_share_their_groups_system_prompt_as_text():
    """Every prompt starts with one of --gsp-num-groups system prompts of the given length,
    each used by --gsp-prompts-per-group prompts; --num-prompts does not change the count."""
    sent = _sent("--dataset-name", "shared-prefix", "--num-prompts", "999", "--gsp-num-groups", "3",
                 "--gsp-prompts-per-group", "5", "--gsp-system-prompt-len", "20",
                 "--gsp-question-len", "4", "--gsp-output-len", "6")
    assert len(sent) == 15 and {s.max_tokens for s in sent} == {6}
    systems = [s.prompt[:20 * 4] for s in sent]
    assert sorted(systems.count(p) for p in set(systems)) == [5, 5, 5]
    assert {len(CODEC.encode(s.prompt)) for s in sent} == {24}


def test_sharegpt_output_len_fixes_every_output_length():
    """--sharegpt-output-len replaces the drawn output lengths; the prompts still vary."""
    sent = _sent("--dataset-name", "sharegpt-like", "--num-prompts", "20", "--sharegpt-output-len", "17")
    assert {s.max_tokens for s in sent} == {17} and len({len(s.prompt) for s in sent}) > 1


def test_random_range_ratio_spreads_lengths_within_vllms_bounds():
    """--random-range-ratio 0.5 draws input and output lengths in [len/2, 3 len/2], not all alike."""
    sent = _sent("--num-prompts", "60", "--random-input-len", "40", "--random-output-len", "10",
                 "--random-range-ratio", "0.5")
    inputs = [len(CODEC.encode(s.prompt)) for s in sent]
    outputs = [s.max_tokens for s in sent]
    assert min(inputs) >= 20 and max(inputs) <= 60 and len(set(inputs)) > 10
    assert min(outputs) >= 5 and max(outputs) <= 15 and len(set(outputs)) > 3
