"""Validation matrix for `validate_request` and `SamplingParams` (semantics §2.2-§2.3)."""

import dataclasses
import json

import numpy as np
import pytest

from shared.request.invalid_request import InvalidRequestError
from shared.request.sampling_params import TOP_K_ALL, SamplingParams
from shared.request.validation import validate_request

VOCAB = 100
CTX = 200  # above PROMPT + the default max_new_tokens (128)
PROMPT = [1, 2, 3, 4]
BIG = {"context_len": 10_000}  # room for max_new_tokens above the 4096 clip
REQUEST_KEYS = {"context_len", "max_total_tokens", "page_size"}


def check(input_ids=PROMPT, **kwargs):
    """Validate one request; kwargs are sampling parameters or REQUEST_KEYS."""
    req = {"context_len": CTX} | {k: kwargs.pop(k) for k in REQUEST_KEYS & kwargs.keys()}
    validate_request(input_ids, SamplingParams(**kwargs), vocab_size=VOCAB, **req)


# One row per rejected request: (input_ids, kwargs, field at fault).
REQUEST_REJECTS = [
    ([], {}, "input_ids"),
    ([-1], {}, "input_ids"),
    ([VOCAB], {}, "input_ids"),
    ([1, 2, VOCAB + 7], {}, "input_ids"),
    ([1] * CTX, {"max_new_tokens": 1}, "input_ids"),
    ([1] * (CTX + 5), {"max_new_tokens": 1}, "input_ids"),
    ([1] * (CTX - 1), {"max_new_tokens": 2}, "max_new_tokens"),
    (PROMPT, {"max_new_tokens": CTX - len(PROMPT) + 1}, "max_new_tokens"),
    (PROMPT, {"max_new_tokens": CTX - len(PROMPT)}, "max_new_tokens"),
    ([1] * (CTX - 1), {"max_new_tokens": 1}, "max_new_tokens"),
    (PROMPT, {"max_new_tokens": 10, "max_total_tokens": 15}, "max_new_tokens"),
    (PROMPT, {"max_new_tokens": 10, "max_total_tokens": 18, "page_size": 4}, "max_new_tokens"),
    (PROMPT, {"max_new_tokens": 5000, "max_total_tokens": 4101, **BIG}, "max_new_tokens"),
    (PROMPT, {"logprob_start_len": len(PROMPT) + 1}, "logprob_start_len"),
]
# Sampling-parameter rejections: also raised by `SamplingParams.validate` alone.
PARAM_REJECTS = [
    ({"temperature": -0.5}, "temperature"),
    ({"temperature": -1e-9}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.0001}, "top_p"),
    ({"top_p": -0.1}, "top_p"),
    ({"min_p": -0.01}, "min_p"),
    ({"min_p": 1.01}, "min_p"),
    ({"top_k": 0}, "top_k"),
    ({"top_k": -2}, "top_k"),
    ({"frequency_penalty": 2.01}, "frequency_penalty"),
    ({"frequency_penalty": -2.01}, "frequency_penalty"),
    ({"presence_penalty": 2.01}, "presence_penalty"),
    ({"presence_penalty": -2.01}, "presence_penalty"),
    ({"repetition_penalty": -0.01}, "repetition_penalty"),
    ({"repetition_penalty": 2.01}, "repetition_penalty"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"max_new_tokens": -3}, "max_new_tokens"),
    ({"min_new_tokens": -1}, "min_new_tokens"),
    ({"min_new_tokens": 11, "max_new_tokens": 10}, "min_new_tokens"),
    ({"logit_bias": {VOCAB: 1.0}}, "logit_bias"),
    ({"logit_bias": {-1: 1.0}}, "logit_bias"),
    ({"stop_token_ids": [VOCAB]}, "stop_token_ids"),
    ({"stop_token_ids": [-1]}, "stop_token_ids"),
    ({"logprob_start_len": -2}, "logprob_start_len"),
    ({"top_logprobs_num": -1}, "top_logprobs_num"),
    ({"n": 2}, "n"),
    ({"regex": "a+"}, "regex"),
    ({"json_schema": "{}"}, "json_schema"),
    ({"ebnf": "root ::= 'a'"}, "ebnf"),
]
UNSUPPORTED = {"n", "regex", "json_schema", "ebnf"}
ALL_REJECTS = REQUEST_REJECTS + [(PROMPT, kw, field) for kw, field in PARAM_REJECTS]

ACCEPTED = [
    ([1] * (CTX - 2), {"max_new_tokens": 1}),
    (PROMPT, {"max_new_tokens": CTX - len(PROMPT) - 1}),
    ([0, VOCAB - 1], {}),
    (np.array([0, VOCAB - 1], dtype=np.int64), {}),
    (np.array([5, 6], dtype=np.int32), {}),
    (np.array([5, 6], dtype=np.uint16), {}),
    (PROMPT, {"max_new_tokens": 10, "max_total_tokens": 16}),
    (PROMPT, {"max_new_tokens": 10, "max_total_tokens": 19, "page_size": 4}),
    (PROMPT, {"max_new_tokens": 5000, "max_total_tokens": 4102, **BIG}),
    (PROMPT, {"temperature": 0.0, "top_p": 1.0, "min_p": 0.0, "top_k": -1}),
    (PROMPT, {"temperature": 1e-6, "top_p": 1e-9, "min_p": 1.0, "top_k": 1}),
    (PROMPT, {"frequency_penalty": 2.0, "presence_penalty": -2.0, "repetition_penalty": 0.0}),
    (PROMPT, {"frequency_penalty": -2.0, "presence_penalty": 2.0, "repetition_penalty": 2.0}),
    (PROMPT, {"max_new_tokens": 1, "min_new_tokens": 1}),
    (PROMPT, {"logit_bias": {0: 1.0, VOCAB - 1: -1.0}, "stop_token_ids": [0, VOCAB - 1]}),
    (PROMPT, {"logprob_start_len": len(PROMPT), "top_logprobs_num": 0}),
    (PROMPT, {"logprob_start_len": -1}),
    (PROMPT, {"logprob_start_len": 0, "return_logprob": True, "top_logprobs_num": 5}),
    (PROMPT, {"n": 1, "regex": None, "json_schema": None, "ebnf": None}),
]

# Each request is bad in two ways; the field checked first must be reported.
ORDER = [
    ([], {"top_p": 0.0}, "input_ids"),
    ([VOCAB], {"temperature": -1.0}, "input_ids"),
    ([1] * CTX, {"temperature": -1.0}, "input_ids"),
    ([1] * (CTX - 1), {"max_new_tokens": 2, "top_p": 0.0}, "max_new_tokens"),
    (PROMPT, {"max_new_tokens": 10, "max_total_tokens": 15, "temperature": -1.0}, "max_new_tokens"),
    (PROMPT, {"temperature": -1.0, "top_p": 0.0}, "temperature"),
    (PROMPT, {"top_p": 0.0, "min_p": 2.0}, "top_p"),
    (PROMPT, {"min_p": 2.0, "top_k": 0}, "min_p"),
    (PROMPT, {"top_k": 0, "frequency_penalty": 3.0}, "top_k"),
    (PROMPT, {"frequency_penalty": 3.0, "presence_penalty": 3.0}, "frequency_penalty"),
    (PROMPT, {"presence_penalty": 3.0, "repetition_penalty": 3.0}, "presence_penalty"),
    (PROMPT, {"repetition_penalty": 3.0, "max_new_tokens": 0}, "repetition_penalty"),
    (PROMPT, {"max_new_tokens": 0, "min_new_tokens": -1}, "max_new_tokens"),
    (PROMPT, {"min_new_tokens": -1, "logit_bias": {VOCAB: 1.0}}, "min_new_tokens"),
    (PROMPT, {"logit_bias": {VOCAB: 1.0}, "stop_token_ids": [VOCAB]}, "logit_bias"),
    (PROMPT, {"stop_token_ids": [VOCAB], "logprob_start_len": -2}, "stop_token_ids"),
    (PROMPT, {"logprob_start_len": -2, "top_logprobs_num": -1}, "logprob_start_len"),
    (PROMPT, {"logprob_start_len": len(PROMPT) + 1, "top_logprobs_num": -1}, "logprob_start_len"),
    (PROMPT, {"top_logprobs_num": -1, "n": 2}, "top_logprobs_num"),
    (PROMPT, {"n": 2, "regex": "a"}, "n"),
    (PROMPT, {"regex": "a", "json_schema": "{}"}, "regex"),
    (PROMPT, {"json_schema": "{}", "ebnf": "x"}, "json_schema"),
]


@pytest.mark.parametrize(("input_ids", "kwargs", "field"), ALL_REJECTS)
def test_invalid_request_raises_naming_field_and_value(input_ids, kwargs, field):
    """Each bad request raises InvalidRequestError with the right field; the message names field and value."""
    with pytest.raises(InvalidRequestError) as info:
        check(input_ids, **kwargs)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.field == field
    assert field in str(err) and repr(err.value) in str(err)
    if isinstance(kwargs.get(field), (int, float)):
        assert err.value == kwargs[field]
    if field in UNSUPPORTED:
        assert "not supported" in str(err)


@pytest.mark.parametrize(("kwargs", "field"), PARAM_REJECTS)
def test_sampling_params_validate_rejects_out_of_range_parameter(kwargs, field):
    """SamplingParams.validate alone rejects each out-of-range parameter under its own name."""
    params = SamplingParams(**kwargs)  # construction never rejects
    with pytest.raises(InvalidRequestError) as info:
        params.validate(VOCAB)
    assert info.value.field == field


@pytest.mark.parametrize(("input_ids", "kwargs"), ACCEPTED)
def test_boundary_values_just_inside_limits_are_accepted(input_ids, kwargs):
    """Requests at the edge of every limit validate without error."""
    assert check(input_ids, **kwargs) is None


@pytest.mark.parametrize(("input_ids", "kwargs", "field"), ORDER)
def test_request_bad_two_ways_reports_earlier_field(input_ids, kwargs, field):
    """Checks run in spec order: of two faults the earlier field is reported."""
    with pytest.raises(InvalidRequestError) as info:
        check(input_ids, **kwargs)
    assert info.value.field == field


@pytest.mark.parametrize(
    "input_ids",
    ["abc", b"\x01\x02", [[1, 2], [3, 4]], [[1], [2, 3]], [1.0, 2.0], np.array([1.5]),
     np.array([[1, 2]]), [True, False], ["1", "2"]],
    ids=["str", "bytes", "2d", "ragged", "floats", "np_float", "np_2d", "bools", "strs"],
)
def test_non_integer_or_nested_input_ids_rejected(input_ids):
    """Text, nested lists, floats and bools are rejected as input_ids."""
    with pytest.raises(InvalidRequestError) as info:
        check(input_ids)
    assert info.value.field == "input_ids"


@pytest.mark.parametrize("temperature", [0, 0.0, -0.0, 5e-7, 9.99e-7])
@pytest.mark.parametrize("top_k", [-1, 50])
def test_near_zero_temperature_normalises_to_greedy(temperature, top_k):
    """0 <= temperature < 1e-6 reads temperature 1.0 and top_k 1, whatever top_k was."""
    p = SamplingParams(temperature=temperature, top_k=top_k)
    assert (p.temperature, p.top_k, p.is_greedy) == (1.0, 1, True)


def test_temperature_at_epsilon_stays_sampled():
    """Temperature exactly 1e-6 is not greedy and keeps top_k -1 as TOP_K_ALL."""
    p = SamplingParams(temperature=1e-6)
    assert (p.temperature, p.top_k, p.is_greedy) == (1e-6, TOP_K_ALL, False)


@pytest.mark.parametrize("temperature", [-1e-9, -0.5])
def test_negative_temperature_kept_then_rejected(temperature):
    """A negative temperature is not normalised to greedy; validate rejects it."""
    p = SamplingParams(temperature=temperature)
    assert (p.temperature, p.top_k) == (temperature, TOP_K_ALL)
    with pytest.raises(InvalidRequestError, match="temperature"):
        p.validate(VOCAB)


def test_top_k_minus_one_reads_top_k_all():
    """top_k -1 (and its default) read TOP_K_ALL == 1 << 30."""
    assert TOP_K_ALL == 1 << 30
    assert SamplingParams(top_k=-1).top_k == SamplingParams().top_k == TOP_K_ALL


def test_defaults_match_sglang():
    """Defaults follow the SGLang table of §2.2."""
    p = SamplingParams()
    assert (p.max_new_tokens, p.temperature, p.top_p, p.top_k, p.min_p) == (128, 1.0, 1.0, TOP_K_ALL, 0.0)
    assert (p.frequency_penalty, p.presence_penalty, p.repetition_penalty) == (0.0, 0.0, 1.0)
    assert (p.min_new_tokens, p.n, p.ignore_eos) == (0, 1, False)
    assert p.stop is p.stop_token_ids is p.logit_bias is p.sampling_seed is None
    assert p.regex is p.json_schema is p.ebnf is None


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(SamplingParams)])
def test_none_means_default(name):
    """Passing None for any parameter gives the same object as omitting it."""
    assert SamplingParams(**{name: None}) == SamplingParams()


@pytest.mark.parametrize(
    ("stop", "expected"), [("end", ("end",)), (["a", "b"], ("a", "b")), (("x",), ("x",)), ([], None)]
)
def test_stop_normalises_to_tuple(stop, expected):
    """A stop string or list reads as a tuple; an empty list reads None."""
    assert SamplingParams(stop=stop).stop == expected


@pytest.mark.parametrize(
    ("ids", "expected"), [([3, 3, 5], frozenset({3, 5})), ({7}, frozenset({7})), ([], None), (set(), None)]
)
def test_stop_token_ids_normalise_to_frozenset(ids, expected):
    """stop_token_ids read as a frozenset; empty reads None."""
    assert SamplingParams(stop_token_ids=ids).stop_token_ids == expected


ROUND_TRIP = [
    SamplingParams(),
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=-0.5, top_k=0),
    SamplingParams(
        max_new_tokens=7, temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, frequency_penalty=0.5,
        presence_penalty=-0.5, repetition_penalty=1.1, min_new_tokens=2, ignore_eos=True,
        stop=["a", "bc"], stop_token_ids=[9, 2], logit_bias={3: 1.5, 0: -2.0}, sampling_seed=42,
        return_logprob=True, logprob_start_len=1, top_logprobs_num=3,
    ),
]


@pytest.mark.parametrize("params", ROUND_TRIP)
def test_to_dict_from_dict_round_trips_through_json(params):
    """from_dict(to_dict(p)) == p, also after a JSON dump and load."""
    assert SamplingParams.from_dict(params.to_dict()) == params
    assert SamplingParams.from_dict(json.loads(json.dumps(params.to_dict()))) == params


def test_from_dict_unknown_key_rejected():
    """An unknown key in from_dict raises InvalidRequestError naming it."""
    with pytest.raises(InvalidRequestError, match="top_q"):
        SamplingParams.from_dict({"top_p": 0.5, "top_q": 0.5})


def test_prompt_plus_max_new_tokens_must_stay_below_the_context_length():
    """SGLang's TokenizerManager._validate_one_request (semantics §2.3) refuses
    `max_new_tokens + input_token_num >= context_len` with "Requested token count exceeds the
    model's maximum context length": one token below the context is served, filling it is not."""
    ok = dict(context_len=CTX, max_total_tokens=None, page_size=1)
    validate_request(PROMPT, SamplingParams(max_new_tokens=CTX - len(PROMPT) - 1), vocab_size=VOCAB, **ok)
    for max_new in (CTX - len(PROMPT), CTX - len(PROMPT) + 1):
        with pytest.raises(InvalidRequestError,
                           match="exceeds the model's maximum context length of") as e:
            validate_request(PROMPT, SamplingParams(max_new_tokens=max_new), vocab_size=VOCAB, **ok)
        assert e.value.field == "max_new_tokens" and e.value.value == max_new
