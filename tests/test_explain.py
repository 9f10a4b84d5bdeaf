"""`batchtwin explain`: ARCHITECTURE.md §4 run by exec (tiny random Llama, CPU) and by sim (replaying
exec's tokens), step by step, side by side."""

import copy
import json

import pytest

from experiments.explain import explain
from experiments.explain_cmd import MARK, format_explain
from experiments.golden_example import explain_sim
from experiments.main import main


@pytest.fixture(scope="module")
def golden():
    return explain(seed=0)


def test_exec_and_sim_agree_on_every_step_of_the_golden_example(golden):
    """Every shown field of every step is equal in the exec and sim columns, and so are the StepRecords."""
    assert golden["agree"] and golden["records_agree"]
    assert golden["step_counts"] == [3, 3]
    for step in golden["steps"]:
        assert step["differs"] == []
        assert step["exec"] == step["sim"]


def test_steps_and_modes_match_design_section_4(golden):
    """A warm-up EXTEND, then ARCHITECTURE §4's EXTEND of a and b, then its DECODE."""
    assert [(s["exec"]["forward_mode"], s["exec"]["rids"]) for s in golden["steps"]] == [
        ("EXTEND", ["warm"]), ("EXTEND", ["a", "b"]), ("DECODE", ["a", "b"])]


def test_extend_step_has_the_design_fields(golden):
    """The EXTEND step's fields are ARCHITECTURE §4's, in both columns."""
    for view in (golden["steps"][1]["exec"], golden["steps"][1]["sim"]):
        assert view["input_ids"] == [11, 12, 13, 14, 15, 16, 24, 25, 26]
        assert view["positions"] == [0, 1, 2, 3, 4, 5, 3, 4, 5]
        assert (view["extend_prefix_lens"], view["extend_seq_lens"]) == ([0, 3], [6, 3])
        assert (view["seq_lens"], view["extend_start_loc"]) == ([6, 6], [0, 6])
        assert view["selected_rows"] == [5, 8]
        assert view["logits_shape"] == [2, 256]
        assert len(view["out_cache_loc"]) == 9 and 0 not in view["out_cache_loc"]


def test_decode_step_feeds_the_tokens_the_extend_sampled(golden):
    """The DECODE's inputs are the EXTEND's sampled ids, at positions [6, 6], seq_lens [7, 7], rows [0, 1]."""
    ext, dec = golden["steps"][1]["exec"], golden["steps"][2]["exec"]
    assert dec["input_ids"] == ext["next_token_ids"]
    assert (dec["positions"], dec["seq_lens"], dec["selected_rows"]) == ([6, 6], [7, 7], [0, 1])
    assert dec["extend_seq_lens"] == []
    assert dec["req_pool_indices"] == ext["req_pool_indices"]


def test_json_output_round_trips(golden, capsys):
    """`explain --json` prints JSON that loads back to exactly the explained run."""
    assert main(["explain", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == golden


def test_text_output_shows_both_columns_and_the_verdict(capsys):
    """The text output has an exec and a sim column per step, no difference marks, and says they agree."""
    assert main(["explain"]) == 0
    out = capsys.readouterr().out
    assert out.count("field ") == 3 and "sim" in out
    assert "[11,12,13,14,15,16,24,25,26]  [11,12,13,14,15,16,24,25,26]" in out
    assert MARK not in out
    assert "exec and sim agree on all 3 steps" in out


def test_a_differing_field_is_marked(golden):
    """A field whose columns differ gets the mark on its row and the verdict names it."""
    bad = copy.deepcopy(golden)
    step = bad["steps"][2]
    step["sim"]["positions"], step["differs"], bad["agree"] = [6, 7], ["positions"], False
    lines = format_explain(bad).splitlines()
    assert [ln.split()[0] for ln in lines if ln.endswith(MARK)] == ["positions"]
    assert lines[-1] == "exec and sim DIFFER: step 2 (positions)"


def test_unknown_hardware_is_one_line_on_stderr(capsys):
    """An unknown --hardware key exits 1 with a one-line message."""
    assert main(["explain", "--hardware", "tpu9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("batchtwin explain: ") and err.count("\n") == 1


def test_sim_only_schedules_the_golden_example_as_the_full_run_does(golden):
    """`explain_sim` (no torch) gives every step's fields of the full run's sim column, but
    for the token ids it draws itself (next_token_ids, and the DECODE's input_ids)."""
    alone = explain_sim(seed=0)
    assert alone["step_counts"] == [3]
    for own, full in zip(alone["steps"], golden["steps"], strict=True):
        decode = full["sim"]["forward_mode"] == "DECODE"
        token_fields = {"next_token_ids", *(["input_ids"] if decode else [])}
        assert {k: v for k, v in own["sim"].items() if k not in token_fields} == \
            {k: v for k, v in full["sim"].items() if k not in token_fields}
        assert own["sim_priced_ms"] == full["sim_priced_ms"]


def test_sim_only_text_output_has_one_sim_column(capsys):
    """`explain --sim-only` exits 0 and prints a `field | sim` table per step and no exec column."""
    assert main(["explain", "--sim-only"]) == 0
    out = capsys.readouterr().out
    assert out.count("  field               sim\n") == 3 and "exec:" not in out
