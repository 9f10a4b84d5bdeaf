"""`Workload`: a seeded, reproducible list of requests that both executors run.

Every constructor takes `seed` and draws everything (arrivals, lengths, token ids, order)
from one `numpy.random.default_rng(seed)`, so the same arguments give an identical
workload. Token ids are uniform in [0, vocab_size). Unless a `sampling_params` template is
given, each request asks for `SamplingParams(max_new_tokens=output_len, ignore_eos=True)`;
with one, `dataclasses.replace(template, max_new_tokens=output_len)`.

Arrivals (`arrival_times`) follow `vllm bench serve`: gaps are gamma with shape
`burstiness` and scale `1 / (rate * burstiness)` (mean `1/rate`; burstiness 1 is Poisson,
< 1 burstier, > 1 smoother, inf constant gaps), the first request arrives after one gap,
and `rate=inf` puts every arrival at t=0. Unlike vllm we do not rescale the arrivals so
the last lands exactly at `n / rate`: gaps are the raw gamma draws.

JSONL file: line 1 is a header `{"format": "batchtwin-workload", "version": 1, "name",
"config"}`, then one request per line (`rid, arrival_time, input_ids, sampling_params`).
`config` holds the generator's name and parameters (seed included) as JSON values; it
goes through JSON at construction so a saved and reloaded workload compares equal.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shared.request.invalid_request import InvalidRequestError
from shared.request.req import Req
from shared.request.sampling_params import SamplingParams
from shared.request.validation import token_array
from shared.workload.length_dist import LengthDist, LogNormal, as_length_dist

WORKLOAD_FORMAT = "batchtwin-workload"
WORKLOAD_VERSION = 1
SHAREGPT_MAX_LEN = 2048


@dataclass(frozen=True)
class WorkloadRequest:
    """One request: arrival in seconds from 0, a non-empty prompt, its sampling parameters."""

    rid: str
    arrival_time: float
    input_ids: tuple[int, ...]
    sampling_params: SamplingParams
    _input_array: np.ndarray = field(init=False, repr=False, compare=False)  # [P] int64, read-only

    def __post_init__(self) -> None:
        try:  # NOTE: ints only (never int()-cast: 1.5 or True are refused, naming the token)
            array = token_array(self.input_ids).astype(np.int64)
        except InvalidRequestError as e:
            raise InvalidRequestError(e.field, e.value, f"request {self.rid!r}: {e.reason}") from None
        if not array.size:
            raise InvalidRequestError("input_ids", [], f"request {self.rid!r}: the prompt is empty")
        array.flags.writeable = False
        object.__setattr__(self, "input_ids", tuple(array.tolist()))
        object.__setattr__(self, "_input_array", array)
        if not (math.isfinite(self.arrival_time) and self.arrival_time >= 0):
            raise ValueError(f"request {self.rid!r}: arrival_time must be finite and >= 0, "
                             f"got {self.arrival_time!r}")

    def to_req(self) -> Req:
        return Req(self.rid, self.input_ids, self.sampling_params, arrival_time=self.arrival_time,
                   prompt_array=self._input_array)

    def to_dict(self) -> dict[str, Any]:
        return {"rid": self.rid, "arrival_time": self.arrival_time,
                "input_ids": list(self.input_ids),
                "sampling_params": self.sampling_params.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkloadRequest:
        return cls(d["rid"], float(d["arrival_time"]), tuple(d["input_ids"]),
                   SamplingParams.from_dict(d["sampling_params"]))


@dataclass(frozen=True)
class Workload:
    """Requests sorted by arrival time (stable: ties keep the given order), unique rids, and
    the follow-up turns sent only after a reply (`shared.workload.sessions.FollowUp`: each
    answers a request or an earlier follow-up). `len` counts both."""

    requests: tuple[WorkloadRequest, ...]
    name: str = "workload"
    config: dict[str, Any] = field(default_factory=dict)
    followups: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        # NOTE: normalisation at construction only (sorted requests, JSON-shaped config).
        reqs = tuple(sorted(self.requests, key=lambda r: r.arrival_time))
        seen: set[str] = set()
        for rid in [r.rid for r in reqs] + [f.rid for f in self.followups]:
            if rid in seen:
                raise ValueError(f"workload {self.name!r}: duplicate rid {rid!r} "
                                 f"(request ids must be unique)")
            seen.add(rid)
        for f in self.followups:
            if f.after not in seen or f.after == f.rid:
                raise ValueError(f"workload {self.name!r}: follow-up {f.rid!r} answers "
                                 f"{f.after!r}, which is not another request of the workload")
        object.__setattr__(self, "requests", reqs)
        object.__setattr__(self, "followups", tuple(self.followups))
        object.__setattr__(self, "config", json.loads(json.dumps(self.config)))

    def __len__(self) -> int:
        return len(self.requests) + len(self.followups)

    def __iter__(self) -> Iterator[WorkloadRequest]:
        return iter(self.requests)

    def to_reqs(self) -> list[Req]:
        return [r.to_req() for r in self.requests]

    def to_jsonl(self, path: str | Path) -> None:
        header = {"format": WORKLOAD_FORMAT, "version": WORKLOAD_VERSION,
                  "name": self.name, "config": self.config}
        with open(path, "w") as f:
            f.write(json.dumps(header) + "\n")
            for r in self.requests:
                f.write(json.dumps(r.to_dict()) + "\n")
            for u in self.followups:
                f.write(json.dumps(u.to_dict()) + "\n")

    @classmethod
    def from_jsonl(cls, path: str | Path) -> Workload:
        """The workload `to_jsonl` wrote; ValueError naming the file (and the line) when it
        is not one: a wrong header, a line that is not JSON, a request missing a field."""
        with open(path) as f:
            header = _parse_line(path, 1, f.readline() or "{}", dict)
            if header.get("format") != WORKLOAD_FORMAT or header.get("version") != WORKLOAD_VERSION:
                raise ValueError(f"{path}: not a {WORKLOAD_FORMAT} v{WORKLOAD_VERSION} file "
                                 f"(header format={header.get('format')!r}, "
                                 f"version={header.get('version')!r})")
            lines = [_parse_line(path, n, ln, _request_or_followup)
                     for n, ln in enumerate(f, start=2) if ln.strip()]
        missing = [key for key in ("name", "config") if key not in header]
        if missing:
            raise ValueError(f"workload file {path} line 1 is not a batchtwin workload header "
                             f"(missing field {missing[0]!r})")
        reqs = tuple(x for x in lines if isinstance(x, WorkloadRequest))
        later = tuple(x for x in lines if not isinstance(x, WorkloadRequest))
        return cls(reqs, header["name"], header["config"], later)

    @classmethod
    def synthetic(cls, num_requests: int, prompt_len: int | LengthDist,
                  output_len: int | LengthDist, *, vocab_size: int, seed: int = 0,
                  rate: float = math.inf, burstiness: float = 1.0,
                  sampling_params: SamplingParams | None = None,
                  name: str = "synthetic") -> Workload:
        """`num_requests` independent requests, rids `r0, r1, ...` in arrival order."""
        prompt, output = as_length_dist(prompt_len), as_length_dist(output_len)
        rng = _rng(seed, vocab_size, rate, burstiness, num_requests)
        arrivals = arrival_times(rng, num_requests, rate, burstiness)
        prompts = _token_lists(rng, prompt.sample(rng, num_requests), vocab_size)
        outs = output.sample(rng, num_requests).tolist()
        reqs = [WorkloadRequest(f"r{i}", float(arrivals[i]), prompts[i],
                                _params(sampling_params, outs[i]))
                for i in range(num_requests)]
        config = _config("synthetic", seed, vocab_size, rate, burstiness, sampling_params,
                         num_requests=num_requests, prompt_len=prompt.to_dict(),
                         output_len=output.to_dict())
        return cls(tuple(reqs), name, config)

    @classmethod
    def sharegpt_like(cls, num_requests: int, *, vocab_size: int, seed: int = 0,
                      rate: float = math.inf, burstiness: float = 1.0,
                      prompt_median: float = 200.0, output_median: float = 200.0,
                      sigma: float = 1.0, max_len: int = SHAREGPT_MAX_LEN,
                      sampling_params: SamplingParams | None = None,
                      name: str = "sharegpt_like") -> Workload:
        """A synthetic mix shaped like ShareGPT: prompt and output lengths lognormal with
        medians 200 and sigma 1.0 (means ~330, a heavy right tail: p99 ~ 2000 before
        clipping), each clipped to `max_len // 2` so prompt + output <= `max_len` (vllm's
        ShareGPT filter keeps prompts <= 1024 and prompt + output <= 2048)."""
        cap = max_len // 2
        w = cls.synthetic(num_requests, LogNormal(prompt_median, sigma, cap),
                          LogNormal(output_median, sigma, cap), vocab_size=vocab_size,
                          seed=seed, rate=rate, burstiness=burstiness,
                          sampling_params=sampling_params, name=name)
        config = {**w.config, "generator": "sharegpt_like", "prompt_median": prompt_median,
                  "output_median": output_median, "sigma": sigma, "max_len": max_len}
        return cls(w.requests, name, config)

    @classmethod
    def generated_shared_prefix(cls, num_groups: int, prompts_per_group: int,
                                system_prompt_len: int | LengthDist,
                                question_len: int | LengthDist, output_len: int | LengthDist,
                                *, vocab_size: int, seed: int = 0, rate: float = math.inf,
                                burstiness: float = 1.0,
                                sampling_params: SamplingParams | None = None,
                                name: str = "generated_shared_prefix") -> Workload:
        """SGLang's `generated-shared-prefix`: each group has a random system prompt (its
        length drawn once per group when a distribution is given); each
        prompt (rid `g{group}-p{index}`) is that system prompt + its own random question.
        The prompts are shuffled by the seed, then given arrivals in that order."""
        n = num_groups * prompts_per_group
        rng = _rng(seed, vocab_size, rate, burstiness, n)
        sys_dist, q_dist, o_dist = map(as_length_dist, (system_prompt_len, question_len, output_len))
        systems = _token_lists(rng, sys_dist.sample(rng, num_groups), vocab_size)
        questions = _token_lists(rng, q_dist.sample(rng, n), vocab_size)
        outs = o_dist.sample(rng, n).tolist()
        order = rng.permutation(n).tolist()
        arrivals = arrival_times(rng, n, rate, burstiness)
        reqs = [WorkloadRequest(f"g{i // prompts_per_group}-p{i % prompts_per_group}",
                                float(arrivals[k]),
                                systems[i // prompts_per_group] + questions[i],
                                _params(sampling_params, outs[i]))
                for k, i in enumerate(order)]
        config = _config("generated_shared_prefix", seed, vocab_size, rate, burstiness,
                         sampling_params, num_groups=num_groups,
                         prompts_per_group=prompts_per_group,
                         system_prompt_len=sys_dist.to_dict(), question_len=q_dist.to_dict(),
                         output_len=o_dist.to_dict())
        return cls(tuple(reqs), name, config)

    @classmethod
    def sessions(cls, *args: Any, **kwargs: Any) -> Workload:
        """Closed-loop conversations (`shared.workload.sessions`)."""
        from shared.workload.sessions import sessions

        return sessions(*args, **kwargs)

    @classmethod
    def multi_tenant(cls, *args: Any, **kwargs: Any) -> Workload:
        """Shared-prefix traffic from tenants of Zipf popularity (`shared.workload.multi_tenant`)."""
        from shared.workload.multi_tenant import multi_tenant

        return multi_tenant(*args, **kwargs)

    @classmethod
    def multi_turn(cls, num_conversations: int, turns: int, *, vocab_size: int,
                   user_len: int | LengthDist = 64, output_len: int | LengthDist = 128,
                   think_time: float = 1.0, seed: int = 0, rate: float = math.inf,
                   burstiness: float = 1.0, sampling_params: SamplingParams | None = None,
                   name: str = "multi_turn") -> Workload:
        """Conversations that re-send their history. Conversation starts follow the arrival
        process; turn k (rid `c{conv}-t{k}`) arrives an exponential think time (mean
        `think_time` s) after turn k-1 arrived, and its prompt is turn k-1's prompt + a
        random assistant answer of turn k-1's output length + a new user message.

        NOTE: open loop: a turn does not wait for the previous answer, and the executor's
        real answer differs from the synthetic one, so only the previous prompt is a
        guaranteed prefix-cache hit."""
        if not think_time >= 0:
            raise ValueError(f"think_time must be >= 0 seconds, got {think_time!r}")
        rng = _rng(seed, vocab_size, rate, burstiness, num_conversations * turns)
        u_dist, o_dist = as_length_dist(user_len), as_length_dist(output_len)
        starts = arrival_times(rng, num_conversations, rate, burstiness)
        shape = (num_conversations, turns)
        users = u_dist.sample(rng, num_conversations * turns).reshape(shape).tolist()
        outs = o_dist.sample(rng, num_conversations * turns).reshape(shape).tolist()
        gaps = rng.exponential(think_time, size=shape).tolist()
        reqs = [r for c in range(num_conversations)
                for r in _conversation(rng, c, float(starts[c]), users[c], outs[c], gaps[c],
                                       vocab_size, sampling_params)]
        config = _config("multi_turn", seed, vocab_size, rate, burstiness, sampling_params,
                         num_conversations=num_conversations, turns=turns,
                         user_len=u_dist.to_dict(), output_len=o_dist.to_dict(),
                         think_time=think_time)
        return cls(tuple(reqs), name, config)


def arrival_times(rng: np.random.Generator, n: int, rate: float,
                  burstiness: float = 1.0) -> np.ndarray:
    """[n] float64 arrival times (s): cumulative gamma gaps, mean gap 1/rate (module doc)."""
    _check_arrivals(rate, burstiness)
    if math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        return np.cumsum(np.full(n, 1.0 / rate))
    return np.cumsum(rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n))


def _conversation(rng: np.random.Generator, c: int, start: float, users: list[int],
                  outs: list[int], gaps: list[float], vocab_size: int,
                  template: SamplingParams | None) -> Iterable[WorkloadRequest]:
    history: tuple[int, ...] = ()
    t = start
    for k, (u, o) in enumerate(zip(users, outs, strict=True)):
        if k:
            t += gaps[k]
            history += _tokens(rng, outs[k - 1], vocab_size)
        history += _tokens(rng, u, vocab_size)
        yield WorkloadRequest(f"c{c}-t{k}", t, history, _params(template, o))


def _tokens(rng: np.random.Generator, n: int, vocab_size: int) -> tuple[int, ...]:
    return tuple(rng.integers(0, vocab_size, size=n).tolist())


def _token_lists(rng: np.random.Generator, lengths: np.ndarray,
                 vocab_size: int) -> list[tuple[int, ...]]:
    """One draw for all prompts, cut into `lengths` pieces."""
    flat = rng.integers(0, vocab_size, size=int(lengths.sum())).tolist()
    ends = np.cumsum(lengths).tolist()
    return [tuple(flat[e - n:e]) for n, e in zip(lengths.tolist(), ends, strict=True)]


def _params(template: SamplingParams | None, max_new_tokens: int) -> SamplingParams:
    if template is None:
        return SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
    return dataclasses.replace(template, max_new_tokens=max_new_tokens)


def _rng(seed: int, vocab_size: int, rate: float, burstiness: float,
         n: int) -> np.random.Generator:
    """Check the parameters every constructor shares, then the one generator it draws from."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    if n < 0:
        raise ValueError(f"number of requests must be >= 0, got {n}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer (a workload is reproducible), got {seed!r}")
    _check_arrivals(rate, burstiness)
    return np.random.default_rng(seed)


def _check_arrivals(rate: float, burstiness: float) -> None:
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s (inf: all at t=0), got {rate!r}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0 (1 is Poisson), got {burstiness!r}")


def _config(generator: str, seed: int, vocab_size: int, rate: float, burstiness: float,
            template: SamplingParams | None, **params: Any) -> dict[str, Any]:
    return {"generator": generator, "seed": seed, "vocab_size": vocab_size,
            "rate": float(rate), "burstiness": float(burstiness), **params,
            "sampling_params": template.to_dict() if template is not None else None}


def _request_or_followup(d: dict) -> Any:
    """A request line, or a follow-up turn's (it names the turn it answers: `after`)."""
    if "after" in d:
        from shared.workload.sessions import FollowUp

        return FollowUp.from_dict(d)
    return WorkloadRequest.from_dict(d)


def _parse_line(path: str | Path, number: int, line: str, build: Callable[[dict], Any]) -> Any:
    """`build(json.loads(line))`; ValueError naming the file and line when the line is not a
    JSON object or lacks a field `build` needs."""
    try:
        value = json.loads(line)
        if not isinstance(value, dict):
            raise TypeError(f"a JSON object, got {type(value).__name__}")
        return build(value)
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(f"workload file {path} line {number} is not a batchtwin workload "
                         f"line ({what})") from None
