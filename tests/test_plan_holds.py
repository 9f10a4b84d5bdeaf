"""`python -m experiments.plan_holds`: a plan re-checked longer and on other seeds."""

from __future__ import annotations

import json

from experiments.plan_holds import main

TINY = ("--model smollm2-135m --workload synthetic --prompt-len 64 --output-len 16 "
        "--num-requests 40 --seeds 1 --rate-tolerance 0.2 --chunked-prefill-size 512 "
        "--max-running-requests auto --slo ttft_p90=50ms,tpot_p90=4ms --jobs 1")


def test_a_plan_is_rechecked_longer_on_seeds_it_did_not_use(tmp_path, capsys):
    """The recommended configuration is re-simulated at its recommended rate with 2x the
    requests its max rate needed, once per new seed; a longer search of it is compared;
    holds.json records every check and the exit code says whether all held."""
    out = tmp_path / "holds"
    code = main(["--plans", "custom", "--custom", TINY, "--scale", "2", "--seeds", "7,8",
                 "--out", str(out)])
    row = json.loads((out / "holds.json").read_text())[0]
    assert code == (0 if row["holds"] else 1)
    (longer,) = row["longer"]
    assert [c["ok"] for c in row["checks"]] == [longer["gap"] <= 0.05,
                                               row["resimulated"][0]["meets"]]
    assert longer["max_rate"] == row["max_rate"]
    runs = row["resimulated"][0]["runs"]
    assert [r["seed"] for r in runs] == [7, 8] and row["recommended_rate"] < row["max_rate"]
    assert all(r["requests"] % 80 == 0 for r in runs)   # 2x a multiple of --num-requests
    assert "custom: " in capsys.readouterr().out
