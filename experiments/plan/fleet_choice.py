"""`batchtwin plan --target-rate R [--gpu-hour-price ...]`: the fewest GPUs that serve R
req/s within the SLOs, and what a million output tokens cost.

A configuration serves R when its found max rate (every seed passing) is at least R. Among
those the fewest GPUs win (tp x dp), ties by goodput per GPU. Cost per million output tokens
at a rate r: GPUs x price per GPU-hour / (r x mean output tokens per request x 3600 / 1e6)
(without a price, the GPU-hours: GPUs / (r x mean output tokens x 3600 / 1e6)),
the mean taken from the runs at the configuration's max rate. `--gpu-hour-price` is one
number for every hardware key or KEY=PRICE pairs (a swept key without a price is refused).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from experiments.plan.search import Outcome
from experiments.plan.slo import format_rate


def parse_prices(text: str | None, hardware: Sequence[str]) -> dict[str, float]:
    """{hardware key: $ per GPU-hour}; {} without prices. ValueError naming the problem."""
    if not text:
        return {}
    items = [s.strip() for s in text.split(",") if s.strip()]
    if len(items) == 1 and "=" not in items[0]:
        return dict.fromkeys(hardware, _price(items[0], "--gpu-hour-price"))
    prices = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--gpu-hour-price: {item!r} is not KEY=PRICE")
        prices[key.strip()] = _price(value, f"--gpu-hour-price {key.strip()}")
    missing = [h for h in hardware if h not in prices]
    if missing:
        raise ValueError(f"--gpu-hour-price: no price for {', '.join(missing)}")
    return prices


def _price(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{flag}: {text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{flag}: the price must be > 0, got {value}")
    return value


def mean_output_tokens(o: Outcome) -> float:
    runs = o.at_rate or o.at_failed
    values = [r.metrics["output_throughput"] / r.metrics["request_throughput"] for r in runs
              if r.metrics.get("request_throughput", 0) > 0]
    return sum(values) / len(values) if values else math.nan


def cost_per_mtok(o: Outcome, rate: float | None, prices: dict[str, float]) -> float:
    """$ per million output tokens at `rate` (NaN without a price or a rate)."""
    price = prices.get(o.candidate.hardware)
    if price is None or not rate:
        return math.nan
    tokens_per_hour = rate * mean_output_tokens(o) * 3600
    return o.candidate.num_gpus * price / (tokens_per_hour / 1e6)


def gpu_hours_per_mtok(o: Outcome, rate: float) -> float:
    """GPU-hours one million output tokens take at `rate` (the cost without a price)."""
    tokens_per_hour = rate * mean_output_tokens(o) * 3600
    return o.candidate.num_gpus / (tokens_per_hour / 1e6) if tokens_per_hour > 0 else math.nan


def fewest_gpus(ranked: Sequence[Outcome], target: float) -> Outcome | None:
    """The configuration serving `target` req/s on the fewest GPUs (None: none does)."""
    serving = [o for o in ranked if o.feasible and o.rate >= target]
    if not serving:
        return None
    return min(serving, key=lambda o: (o.candidate.num_gpus, -o.goodput_per_gpu))


def target_section(choice: Outcome | None, target: float, prices: dict[str, float]) -> str:
    head = f"## Target rate\n\n{format_rate(target)} req/s: "
    if choice is None:
        return head + ("**no configuration serves it** within the SLOs; add replicas "
                       "(--dp), a higher TP degree or faster hardware.")
    c = choice.candidate
    cost = cost_per_mtok(choice, target, prices)
    hours = f"{gpu_hours_per_mtok(choice, target):.3g} GPU-hours per million output tokens"
    money = (f", **${cost:.3f} per million output tokens** at "
             f"${prices[c.hardware]:g} per GPU-hour ({hours})" if math.isfinite(cost) else
             f", {hours} (give --gpu-hour-price for the price)")
    return head + (f"**{c.label}** on **{c.num_gpus} GPUs** (max rate "
                   f"{format_rate(choice.rate)} req/s, {choice.limit.kind} binds){money}.")


def target_line(choice: Outcome | None, target: float, prices: dict[str, float]) -> str:
    """The one line `plan` prints for --target-rate."""
    if choice is None:
        return f"target {format_rate(target)} req/s: no configuration serves it within the SLOs"
    cost = cost_per_mtok(choice, target, prices)
    hours = f"{gpu_hours_per_mtok(choice, target):.3g} GPU-hours"
    money = (f", ${cost:.3f} ({hours}) per million output tokens" if math.isfinite(cost)
             else f", {hours} per million output tokens")
    return (f"target {format_rate(target)} req/s: {choice.candidate.label} on "
            f"{choice.candidate.num_gpus} GPUs{money}")
