"""Bad input never poisons the engine: every bad value is refused before admission (issue 24).

The first half checks the shared rules (`SamplingParams.validate`, `validate_request`, the
Scheduler's `add_request`) without torch, so the simulator refuses what the executor does;
the second half checks the executor's `Engine`: a bad request in a batch is refused before
anything is queued or run, and the engine then serves the next call and is idle, leak-free.
"""

import math

import numpy as np
import pytest

from shared import EngineConfig, InvalidRequestError, ModelInfo, Req, SamplingParams, Scheduler
from shared.request.sampling_params import LOGIT_BIAS_LIMIT, SEED_MAX, SEED_MIN, TOP_K_ALL
from shared.request.validation import validate_request

VOCAB = 100
PROMPT = [1, 2, 3, 4]
GOOD = {"max_new_tokens": 3, "ignore_eos": True}

# --- the shared rules (no torch) -----------------------------------------------------------

# (sampling parameters, field at fault)
PARAM_REJECTS = [
    ({"ignore_eos": "no"}, "ignore_eos"),
    ({"ignore_eos": 1}, "ignore_eos"),
    ({"return_logprob": "yes"}, "return_logprob"),
    ({"temperature": "1"}, "temperature"),
    ({"temperature": True}, "temperature"),
    ({"temperature": math.inf}, "temperature"),
    ({"temperature": math.nan}, "temperature"),
    ({"top_p": "0.5"}, "top_p"),
    ({"min_p": None, "top_p": math.nan}, "top_p"),
    ({"min_p": "0"}, "min_p"),
    ({"frequency_penalty": "0"}, "frequency_penalty"),
    ({"presence_penalty": math.nan}, "presence_penalty"),
    ({"repetition_penalty": "1"}, "repetition_penalty"),
    ({"top_k": 1.5}, "top_k"),
    ({"top_k": "5"}, "top_k"),
    ({"top_k": True}, "top_k"),
    ({"top_k": -1.0}, "top_k"),
    ({"max_new_tokens": 5.0}, "max_new_tokens"),
    ({"max_new_tokens": "5"}, "max_new_tokens"),
    ({"max_new_tokens": True}, "max_new_tokens"),
    ({"min_new_tokens": 1.0}, "min_new_tokens"),
    ({"logit_bias": {5: "x"}}, "logit_bias"),
    ({"logit_bias": {5: math.inf}}, "logit_bias"),
    ({"logit_bias": {5: -math.inf}}, "logit_bias"),
    ({"logit_bias": {5: math.nan}}, "logit_bias"),
    ({"logit_bias": {5: 1e308}}, "logit_bias"),
    ({"logit_bias": {5: 100.5}}, "logit_bias"),
    ({"logit_bias": {5: True}}, "logit_bias"),
    ({"logit_bias": {1.5: 1.0}}, "logit_bias"),
    ({"logit_bias": {"x": 1.0}}, "logit_bias"),
    ({"logit_bias": {True: 1.0}}, "logit_bias"),
    ({"logit_bias": [(5, 1.0)]}, "logit_bias"),
    ({"stop_token_ids": [1.5]}, "stop_token_ids"),
    ({"stop_token_ids": ["x"]}, "stop_token_ids"),
    ({"stop_token_ids": [True]}, "stop_token_ids"),
    ({"stop_token_ids": 5}, "stop_token_ids"),
    ({"stop_token_ids": [[1]]}, "stop_token_ids"),
    ({"stop": 5}, "stop"),
    ({"stop": [b"x"]}, "stop"),
    ({"sampling_seed": 2**70}, "sampling_seed"),
    ({"sampling_seed": SEED_MAX + 1}, "sampling_seed"),
    ({"sampling_seed": SEED_MIN - 1}, "sampling_seed"),
    ({"sampling_seed": 1.5}, "sampling_seed"),
    ({"sampling_seed": "1"}, "sampling_seed"),
    ({"sampling_seed": True}, "sampling_seed"),
    ({"return_logprob": True, "top_logprobs_num": VOCAB + 1}, "top_logprobs_num"),
    ({"top_logprobs_num": 1.0}, "top_logprobs_num"),
    ({"logprob_start_len": 0.5}, "logprob_start_len"),
]

PARAM_ACCEPTED = [
    {"ignore_eos": True, "return_logprob": False},
    {"ignore_eos": np.bool_(True)},
    {"temperature": np.float32(0.5), "top_p": np.float64(0.9), "min_p": 0},
    {"top_k": np.int64(5), "max_new_tokens": np.int32(4), "min_new_tokens": np.int16(1)},
    {"logit_bias": {5: LOGIT_BIAS_LIMIT, 6: -LOGIT_BIAS_LIMIT, np.int64(7): np.float32(1.5), 8: 3}},
    {"logit_bias": {"5": 1.0}},  # JSON's string keys
    {"sampling_seed": SEED_MAX},
    {"sampling_seed": SEED_MIN},
    {"sampling_seed": np.int64(-5)},
    {"return_logprob": True, "top_logprobs_num": VOCAB},
    {"stop_token_ids": [np.int64(3), 4]},
]


@pytest.mark.parametrize(("kwargs", "field"), PARAM_REJECTS)
def test_a_badly_typed_or_out_of_range_parameter_is_refused_naming_the_field(kwargs, field):
    """Construction never raises; validate refuses with InvalidRequestError naming field and value."""
    params = SamplingParams(**kwargs)
    with pytest.raises(InvalidRequestError) as info:
        params.validate(VOCAB)
    assert info.value.field == field and str(info.value).startswith(f"invalid {field}=")
    with pytest.raises(InvalidRequestError):
        validate_request(PROMPT, params, vocab_size=VOCAB, context_len=1000)


@pytest.mark.parametrize("kwargs", PARAM_ACCEPTED)
def test_well_typed_parameters_at_their_limits_are_accepted(kwargs):
    """numpy scalars, JSON string keys and values at each documented limit validate."""
    assert SamplingParams(**kwargs).validate(VOCAB) is None


def test_a_huge_top_k_reads_as_all_tokens():
    """top_k above TOP_K_ALL normalises to TOP_K_ALL (every top_k >= the vocabulary keeps all)."""
    assert SamplingParams(top_k=2**63).top_k == TOP_K_ALL
    assert SamplingParams(top_k=np.int64(2**62)).top_k == TOP_K_ALL
    assert SamplingParams(top_k=TOP_K_ALL - 1).top_k == TOP_K_ALL - 1
    SamplingParams(top_k=2**63).validate(VOCAB)


def test_a_numpy_bool_flag_reads_as_a_python_bool():
    """np.bool_ flags are kept as plain bools, so to_dict stays JSON-ready."""
    p = SamplingParams(ignore_eos=np.bool_(True), return_logprob=np.bool_(False))
    assert type(p.ignore_eos) is bool and type(p.return_logprob) is bool


def test_from_dict_of_a_non_mapping_is_refused_naming_sampling_params():
    """SamplingParams.from_dict(5) raises InvalidRequestError, not TypeError."""
    with pytest.raises(InvalidRequestError) as info:
        SamplingParams.from_dict(5)
    assert info.value.field == "sampling_params"


@pytest.mark.parametrize("input_ids", [
    [1, 1.5], [True, 2], [1, "a"], ["1", "2"], [1, None], b"hello", bytearray(b"\x01"), True, 5,
    None, 1.5, np.array([True, False]), np.array([1.5]), np.array(["1"]), [2**70], [[1, 2]],
], ids=["float", "bool", "str", "strs", "none", "bytes", "bytearray", "lone_bool", "lone_int",
        "lone_none", "lone_float", "np_bool", "np_float", "np_str", "huge", "nested"])
def test_prompt_ids_that_are_not_ints_are_refused_naming_input_ids(input_ids):
    """Floats, bools, text, bytes, None and non-sequences are refused as input_ids."""
    with pytest.raises(InvalidRequestError) as info:
        validate_request(input_ids, SamplingParams(), vocab_size=VOCAB, context_len=1000)
    assert info.value.field == "input_ids"


@pytest.mark.parametrize("input_ids", [
    [1, 2], (1, 2), range(1, 3), [np.int64(1), np.int32(2)], np.array([1, 2], dtype=np.int16),
    np.array([1, 2], dtype=np.uint8),
])
def test_prompt_ids_as_ints_or_integer_arrays_are_accepted(input_ids):
    """Lists, tuples and ranges of ints (Python's or numpy's) and integer arrays are prompts."""
    assert validate_request(input_ids, SamplingParams(), vocab_size=VOCAB, context_len=1000) is None


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"ignore_eos": "no"}, "ignore_eos"), ({"logit_bias": {5: "x"}}, "logit_bias"),
    ({"sampling_seed": 2**70}, "sampling_seed"), ({"logit_bias": {5: math.nan}}, "logit_bias"),
])
def test_the_simulators_scheduler_refuses_the_same_parameters(kwargs, field):
    """Scheduler.add_request (shared by both executors) refuses them, queueing nothing."""
    sched = Scheduler(EngineConfig(max_total_tokens=512), ModelInfo(VOCAB, (0,), 512))
    with pytest.raises(InvalidRequestError) as info:
        sched.add_request(Req("a", PROMPT, SamplingParams(**kwargs)))
    assert info.value.field == field
    assert sched.is_idle() and not sched.reqs and not sched.trace.requests


@pytest.mark.parametrize("prompt", [[1, 1.5], [True, 2], [1, "a"], np.array([1.5, 2.0])],
                         ids=["float", "bool", "str", "float-array"])
def test_a_request_built_with_a_non_int_prompt_is_refused_not_cast(prompt):
    """A Req keeps a prompt that is not all ints as given (no int() cast: 1.5 never becomes
    1, True never 1), so Scheduler.add_request refuses it naming input_ids."""
    sched = Scheduler(EngineConfig(max_total_tokens=512), ModelInfo(VOCAB, (0,), 512))
    with pytest.raises(InvalidRequestError) as info:
        sched.add_request(Req("a", prompt))
    assert info.value.field == "input_ids"
    assert sched.is_idle() and not sched.reqs


# --- the executor's Engine -------------------------------------------------------------------


@pytest.fixture
def engine(tiny_checkpoint):
    """A fresh engine per test, so that a poisoned one never leaks into the next test."""
    from exec.engine.engine import Engine

    folder, _ = tiny_checkpoint("llama")
    return Engine(folder, max_total_tokens=512)


def refused_before_anything_runs(engine, bad_prompt, bad_params, field: str) -> InvalidRequestError:
    """generate(good, bad) refuses `field` of prompt 1 having run nothing; the next call runs, leak-free."""
    steps, requests = len(engine.trace.steps), dict(engine.trace.requests)
    with pytest.raises(InvalidRequestError) as info:
        engine.generate([[1, 2, 3], bad_prompt], [GOOD, bad_params])
    assert info.value.field == field and "prompt 1" in str(info.value)
    assert "\n" not in str(info.value)
    sched = engine.scheduler
    assert sched.is_idle() and not sched.waiting_queue and not sched.reqs and not engine.trackers
    assert len(engine.trace.steps) == steps and dict(engine.trace.requests) == requests
    out = engine.generate([4, 5, 6], GOOD)
    assert len(out.token_ids) == 3
    assert engine.scheduler.is_idle()
    engine.scheduler.mem.check_idle()
    return info.value


def test_a_non_int_logit_bias_value_is_refused_before_the_step(engine):
    """logit_bias={5: "x"} is refused at admission (it used to raise inside a step)."""
    refused_before_anything_runs(engine, [7, 8], {**GOOD, "logit_bias": {5: "x"}}, "logit_bias")


def test_a_sampling_seed_outside_int64_is_refused_naming_the_field(engine):
    """sampling_seed=2**70 is refused at admission (it used to overflow inside a step)."""
    refused_before_anything_runs(engine, [7, 8], {**GOOD, "sampling_seed": 2**70}, "sampling_seed")


def test_a_string_for_a_bool_flag_is_refused_naming_the_field(engine):
    """ignore_eos="no" is refused (it used to read as true)."""
    refused_before_anything_runs(engine, [7, 8], {**GOOD, "ignore_eos": "no"}, "ignore_eos")


def test_a_top_logprobs_num_above_the_vocabulary_is_refused(engine):
    """top_logprobs_num must be at most the vocabulary size (257 > 256)."""
    bad = {**GOOD, "return_logprob": True, "top_logprobs_num": 257}
    refused_before_anything_runs(engine, [7, 8], bad, "top_logprobs_num")


def test_a_request_that_would_fill_the_context_is_refused_in_both_executors(engine):
    """prompt + max_new_tokens == context_length (512 here) is refused naming max_new_tokens, by
    the real engine and by the simulator's scheduler alike; one token less is accepted."""
    prompt = [7] * 500
    refused_before_anything_runs(engine, prompt, {**GOOD, "max_new_tokens": 12}, "max_new_tokens")
    sched = Scheduler(EngineConfig(max_total_tokens=4096), ModelInfo(VOCAB, (0,), 512))
    with pytest.raises(InvalidRequestError, match="maximum context length of 512") as info:
        sched.add_request(Req("a", prompt, SamplingParams(max_new_tokens=12)))
    assert info.value.field == "max_new_tokens" and not sched.reqs
    sched.add_request(Req("a", prompt, SamplingParams(max_new_tokens=11)))


@pytest.mark.parametrize("params", [5, "temperature=0", 1.5])
def test_sampling_params_of_the_wrong_type_are_refused_naming_the_field(engine, params):
    """generate(prompt, sampling_params=5) raises InvalidRequestError, not TypeError."""
    with pytest.raises(InvalidRequestError) as info:
        engine.generate([1, 2, 3], params)
    assert info.value.field == "sampling_params"
    with pytest.raises(InvalidRequestError) as info:
        engine.generate([[1, 2, 3], [4, 5]], [GOOD, params])
    assert info.value.field == "sampling_params"
    assert engine.scheduler.is_idle() and not engine.scheduler.reqs and not engine.trackers
    assert len(engine.generate([4, 5, 6], GOOD).token_ids) == 3
    engine.scheduler.mem.check_idle()


def test_a_huge_top_k_next_to_a_small_one_runs_as_all_tokens(engine):
    """top_k=2**63 batched with top_k=5: both finish, the huge one samples as top_k=-1."""
    hot = {**GOOD, "max_new_tokens": 6, "temperature": 1.5, "sampling_seed": 11}
    outs = engine.generate([[1, 2, 3], [4, 5, 6]], [{**hot, "top_k": 5}, {**hot, "top_k": 2**63}])
    assert [len(o.token_ids) for o in outs] == [6, 6]
    assert engine.scheduler.is_idle()
    engine.scheduler.mem.check_idle()
    same = engine.generate([[1, 2, 3], [4, 5, 6]], [{**hot, "top_k": 5}, {**hot, "top_k": -1}])
    assert [o.token_ids for o in same] == [o.token_ids for o in outs]


@pytest.mark.parametrize("bias", [math.inf, -math.inf, math.nan, 1e308, -1e308])
def test_a_non_finite_or_overflowing_logit_bias_is_refused(engine, bias):
    """logit_bias values must be finite and within [-100, 100] (OpenAI's range)."""
    refused_before_anything_runs(engine, [7, 8], {**GOOD, "logit_bias": {5: bias}}, "logit_bias")


def test_a_logit_bias_of_plus_100_makes_that_token_win(engine):
    """A finite in-range bias (+100, the limit) at temperature 1 makes its token the draw."""
    out = engine.generate([1, 2, 3], {**GOOD, "max_new_tokens": 5, "temperature": 1.0,
                                      "sampling_seed": 3, "logit_bias": {77: 100.0}})
    assert out.token_ids == [77] * 5


@pytest.mark.parametrize("prompt", [[1, 1.5], True, b"hello", [True, 2], [1, "a"], np.array([1.5])],
                         ids=["float", "bool", "bytes", "bool_in_list", "str_in_list", "np_float"])
def test_prompt_ids_that_are_not_ints_are_refused_before_anything_runs(engine, prompt):
    """Floats, bools, bytes and strings among prompt ids are refused (no int() coercion)."""
    refused_before_anything_runs(engine, prompt, GOOD, "input_ids")


@pytest.mark.parametrize("prompt", [True, b"hello", 5, None, [1, 1.5], [True, 2]],
                         ids=["bool", "bytes", "int", "none", "float", "bool_in_list"])
def test_a_lone_bad_prompt_is_refused_naming_the_field(engine, prompt):
    """generate(True), generate(b"hello"), ... raise InvalidRequestError and queue nothing."""
    with pytest.raises(InvalidRequestError) as info:
        engine.generate(prompt, GOOD)
    assert info.value.field in ("prompts", "input_ids")
    assert engine.scheduler.is_idle() and not engine.scheduler.reqs and not engine.trackers


def test_integer_arrays_and_numpy_ints_are_still_prompts(engine):
    """np.int32 arrays, lists of numpy ints and tuples are accepted as token ids."""
    outs = engine.generate([np.array([1, 2, 3], dtype=np.int32), [np.int64(1), 2, 3], (1, 2, 3)],
                           {**GOOD, "temperature": 0})
    assert outs[0].token_ids == outs[1].token_ids == outs[2].token_ids
    single = engine.generate(np.array([1, 2, 3]), {**GOOD, "temperature": 0})
    assert single.token_ids == outs[0].token_ids


def test_a_context_length_beyond_the_model_is_refused_at_construction(tiny_checkpoint):
    """Engine(context_length=10**6) on the 512-position tiny model names context_length."""
    from exec.engine.engine import Engine

    folder, _ = tiny_checkpoint("llama")
    with pytest.raises(ValueError, match="context_length"):
        Engine(folder, context_length=10**6)


def test_a_kv_pool_larger_than_memory_is_refused_naming_the_bytes(tiny_checkpoint):
    """Engine(max_total_tokens=10**12) is refused before allocating, naming the bytes needed."""
    from exec.engine.engine import Engine

    folder, _ = tiny_checkpoint("llama")
    with pytest.raises(ValueError, match="max_total_tokens") as info:
        Engine(folder, max_total_tokens=10**12)
    assert "bytes" in str(info.value) and "available" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("tokens", [0, -1, 1.5, True])
def test_a_non_positive_kv_pool_size_is_refused_naming_the_field(tiny_checkpoint, tokens):
    """max_total_tokens 0, negative or not an int is refused at construction."""
    from exec.engine.engine import Engine

    folder, _ = tiny_checkpoint("llama")
    with pytest.raises(ValueError, match="max_total_tokens"):
        Engine(folder, max_total_tokens=tokens)
