"""Engine: bad input, seeded sampling, result shapes, the runner's eager/no-copy paths."""

import pytest
import torch

from exec.engine.engine import Engine, load_model
from exec.runner.model_runner import TorchModelRunner
from shared import EngineConfig, InvalidRequestError, ModelInfo, Req, SamplingParams, Scheduler
from tests.scripted_runner import drive


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    folder, _ = tiny_checkpoint("llama")
    return Engine(folder, max_total_tokens=512)


@pytest.mark.parametrize("prompt,params,field", [
    ([5, -1, 6], {}, "input_ids"),
    ([5, 256], {}, "input_ids"),
    ([], {}, "input_ids"),
    ([1] * 600, {}, "input_ids"),
    ([1, 2], {"max_new_tokens": 511}, "max_new_tokens"),
    ([1, 2], {"top_p": 0.0}, "top_p"),
    ([1, 2], {"temperature": -1.0}, "temperature"),
    ("some text", {}, "prompt"),
])
def test_bad_input_is_refused_and_the_next_request_runs(engine, prompt, params, field):
    """Each bad request raises InvalidRequestError naming the field and its index; the
    engine then serves the next good request and stays leak-free."""
    with pytest.raises(InvalidRequestError) as e:
        engine.generate([[1, 2, 3], prompt], [{}, params])
    assert e.value.field == field and "prompt 1" in str(e.value)
    out = engine.generate([1, 2, 3], {"max_new_tokens": 3, "ignore_eos": True})
    assert len(out.token_ids) == 3
    engine.scheduler.mem.check_idle()


def test_single_prompt_gives_one_result_and_a_list_gives_a_list(engine):
    """generate(prompt) -> GenerateOutput; generate([p, q]) -> [GenerateOutput, ...]."""
    one = engine.generate([4, 5, 6], {"max_new_tokens": 2, "ignore_eos": True})
    two = engine.generate([[4, 5, 6], [7]], [SamplingParams(max_new_tokens=2, ignore_eos=True),
                                            {"max_new_tokens": 1}])
    assert one.text is None and len(one.token_ids) == 2 and one.finish_reason.type == "length"
    assert [len(o.token_ids) for o in two] == [2, 1]
    assert set(one.meta) == {"prompt_tokens", "cached_tokens", "completion_tokens", "ttft", "e2e"}


def test_unknown_engine_argument_is_refused(tiny_checkpoint):
    """A misspelled EngineConfig field raises TypeError naming it."""
    folder, _ = tiny_checkpoint("llama")
    with pytest.raises(TypeError, match="max_total_token"):
        Engine(folder, max_total_token=512)


def test_seeded_sampling_is_the_same_alone_and_in_a_batch(engine):
    """A seeded request samples the same tokens alone and batched with others; seeds differ."""
    hot = {"max_new_tokens": 10, "temperature": 1.5, "ignore_eos": True}
    alone = engine.generate([9, 8, 7], {**hot, "sampling_seed": 1234}).token_ids
    batch = engine.generate([[1, 2], [9, 8, 7], [3, 3, 3, 3]],
                            [{**hot, "sampling_seed": s} for s in (5, 1234, 6)])
    assert batch[1].token_ids == alone
    others = [engine.generate([9, 8, 7], {**hot, "sampling_seed": s}).token_ids for s in (1, 2, 3)]
    assert any(o != alone for o in others)


def test_engine_seed_makes_unseeded_runs_reproducible(tiny_checkpoint):
    """Two engines with the same random_seed sample the same; another seed differs."""
    folder, _ = tiny_checkpoint("llama")
    hot = {"max_new_tokens": 10, "temperature": 1.5, "ignore_eos": True}
    runs = [Engine(folder, max_total_tokens=256, random_seed=s).generate([[9, 8, 7]] * 3, hot)
            for s in (7, 7, 8)]
    assert [o.token_ids for o in runs[0]] == [o.token_ids for o in runs[1]]
    assert [o.token_ids for o in runs[0]] != [o.token_ids for o in runs[2]]


@pytest.mark.parametrize("copy_to_static", [True, False])
def test_runner_built_without_engine_serves_a_workload(tiny_checkpoint, copy_to_static):
    """TorchModelRunner from load_model + a Scheduler, static-buffer or no-copy path."""
    folder, _ = tiny_checkpoint("qwen3")
    info = ModelInfo(256, (0,), 512)
    sched = Scheduler(EngineConfig(max_total_tokens=256, disable_cuda_graph=True), info)
    runner = TorchModelRunner(load_model(folder), sched.config, info, copy_to_static=copy_to_static)
    reqs = [Req(f"r{i}", [3 + i, 4, 5], SamplingParams(max_new_tokens=4, temperature=0, ignore_eos=True))
            for i in range(3)]
    drive(sched, runner, reqs)
    assert all(sched.trace.requests[r.rid].output_len == 4 for r in reqs)
    assert not any(s.graph for s in sched.trace.steps)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_decode_matches_eager(tiny_checkpoint):
    """On CUDA, graph-replayed decode steps give the eager path's greedy tokens."""
    folder, _ = tiny_checkpoint("llama")
    greedy = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]
    graph = Engine(folder, device="cuda", max_total_tokens=512, cuda_graph_max_bs=8)
    eager = Engine(folder, device="cuda", max_total_tokens=512, disable_cuda_graph=True)
    assert [o.token_ids for o in graph.generate(prompts, greedy)] == \
        [o.token_ids for o in eager.generate(prompts, greedy)]
    decode = [s for s in graph.trace.steps if s.forward_mode == "DECODE"]
    assert decode and all(s.graph and s.padded_batch_size in (4, 8) for s in decode)


def test_text_prompts_are_tokenized_and_outputs_detokenized(tiny_checkpoint, tmp_path):
    """With a tokenizer.json, text goes in and text comes out."""
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers

    folder, _ = tiny_checkpoint("llama")
    shutil.copytree(folder, tmp_path / "m")
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(256)}, unk_token="w1"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "m" / "tokenizer.json"))
    engine = Engine(tmp_path / "m", max_total_tokens=256)
    out = engine.generate("w5 w6 w7", {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True})
    assert out.meta["prompt_tokens"] == 3
    assert out.text == " ".join(f"w{t}" for t in out.token_ids)
    same = engine.generate([5, 6, 7], {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True})
    assert same.token_ids == out.token_ids


def test_generate_leaves_the_scheduler_idle_checked_and_reset(tiny_checkpoint):
    """After generate() the engine polls its idle scheduler: new_token_ratio is back at its
    initial value (so a later call schedules as a fresh serving loop would)."""
    folder, _ = tiny_checkpoint("llama")
    engine = Engine(folder, max_total_tokens=256)
    engine.generate([1, 2, 3], {"max_new_tokens": 30, "ignore_eos": True})
    ratio = engine.scheduler.new_token_ratio
    assert ratio.value == ratio.init


def test_two_runners_can_share_one_loaded_model(tiny_checkpoint):
    """prepare_for_inference is idempotent: a second runner around the same model works."""
    folder, _ = tiny_checkpoint("llama")
    model, info = load_model(folder), ModelInfo(256, (0,), 512)
    for _ in range(2):
        sched = Scheduler(EngineConfig(max_total_tokens=128, disable_cuda_graph=True), info)
        drive(sched, TorchModelRunner(model, sched.config, info),
              [Req("a", [5, 6], SamplingParams(max_new_tokens=3, temperature=0, ignore_eos=True))])
        assert sched.trace.requests["a"].output_len == 3


def test_reset_engine_schedules_like_a_fresh_one(tiny_checkpoint):
    """After reset(), the same requests give the same steps (slots, rows, tokens) as on a
    newly built engine: the warm-up left no trace, cache or allocator order behind."""
    folder, _ = tiny_checkpoint("llama")
    prompts, params = [[1, 2, 3, 4], [1, 2, 3, 9, 9]], {"max_new_tokens": 4, "ignore_eos": True}
    fresh = Engine(folder, max_total_tokens=512)
    fresh.generate(prompts, params)
    used = Engine(folder, max_total_tokens=512)
    used.generate([[7, 7, 7], [1, 2, 3, 4, 5, 6]], params)
    used.reset()
    used.generate(prompts, params)
    strip = lambda s: s.to_dict() | {"start_time": 0, "duration": 0}  # noqa: E731
    assert [strip(s) for s in used.trace.steps] == [strip(s) for s in fresh.trace.steps]
    assert list(used.trace.requests) == list(fresh.trace.requests)


def test_reset_refuses_while_requests_run(engine):
    """reset() on a busy engine raises and leaves the queued request in place."""
    engine.scheduler.add_request(engine.make_requests([[1, 2]], [SamplingParams(max_new_tokens=2)])[0])
    with pytest.raises(RuntimeError, match="idle"):
        engine.reset()
    while engine.step() is not None:
        pass
    engine.scheduler.mem.check_idle()


@pytest.mark.parametrize("engine_args", [
    dict(chunked_prefill_size=None), dict(chunked_prefill_size=8192),
    dict(chunked_prefill_size=None, enable_mixed_chunk=True, max_prefill_tokens=700),
])
def test_the_largest_forward_the_config_allows_fits_the_static_buffers(tiny_checkpoint, engine_args):
    """Extends of more than context_length + max_running_requests tokens run (the static
    input buffers are sized by EngineConfig.max_forward_tokens), leak-free."""
    folder, _ = tiny_checkpoint("llama")
    engine = Engine(folder, max_total_tokens=8192, max_running_requests=8, **engine_args)
    prompts = [[1 + (i + j) % 200 for j in range(200)] for i in range(12)]
    outs = engine.generate(prompts, {"max_new_tokens": 3, "ignore_eos": True})
    assert [len(o.token_ids) for o in outs] == [3] * 12
    widest = max(len(s.input_ids) for s in engine.trace.steps)
    assert widest > 512 + 8 and widest <= engine.scheduler.config.max_forward_tokens()
    engine.scheduler.mem.check_idle()
