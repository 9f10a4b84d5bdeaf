"""`drive_disaggregated`: prefill/decode disaggregation (SGLang's `--disaggregation-mode
prefill|decode` behind its PD router), in simulated time.

x prefill instances and y decode instances, each its own scheduler and runner
(`sim.fleet.driver.Replica`), in one SimPy environment:

1. the prefill router sends each arrival to a prefill instance, which runs the request's
   prompt and samples its first token (the request as sent, capped at one new token);
2. once that instance has processed the result, the request's KV crosses the instance's
   link (`sim.fleet.kv_link`, one transfer after another), then the decode router sends it to a
   decode instance, where it is queued like any request and admitted when its KV fits;
3. the decode instance receives the request with the first token as an output already
   produced (`Handover`, SGLang's decode side appending it to `output_ids`): the whole
   request, its own max_new_tokens and stop conditions counting that token, its KV the
   prompt plus the first token; it decodes the rest from output index 1 on (its extend is
   priced as the decode of those rows: `sim.fleet.transferred_kv_cost`). So the client sees the
   tokens a co-located engine gives it under the same token source.

The client sees the first token when the transfer ends (TTFT includes it, as the engines
report it), then the decode instance's tokens. A request that ends at its first token (one
new token, or a stop token or EOS it honours) never leaves the prefill instance, whose
record ends it by its one-token cap (length); SGLang transfers it and its decode side ends
it. NOTE: the prefill instance frees the request's KV when it finishes, not when the
transfer does, and the decode instance takes KV only on admission (SGLang reserves it
before the prefill starts).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import simpy
from tqdm import tqdm

from shared.loop.batch_result import check_finished
from shared.request.req import Req
from shared.workload.workload import WorkloadRequest
from sim.fleet.driver import Replica, check_fleet_workload
from sim.fleet.fleet_arrivals import FleetArrivals, Inbox
from sim.fleet.replica_loop import make_loop
from sim.run.driver import PROGRESS_DELAY_S, cyclic_gc_paused

if TYPE_CHECKING:
    from shared.config.engine_config import ModelInfo
    from shared.loop.scheduler import Scheduler
    from shared.loop.scheduler_load import SchedulerLoad
    from shared.request.sampling_params import SamplingParams
    from shared.trace.trace import Trace
    from shared.workload.workload import Workload
    from sim.fleet.kv_link import KVLink
    from sim.routers.base import Router


class DisaggRun(NamedTuple):
    prefill_traces: list[Trace]
    decode_traces: list[Trace]
    prefill_of: dict[str, int]                 # rid -> prefill instance
    decode_of: dict[str, int]                  # rid -> decode instance (handed-off requests)
    transfers: dict[str, tuple[float, float]]  # rid -> (start, end) of its KV transfer


def drive_disaggregated(prefill: Sequence[Replica], decode: Sequence[Replica],
                        workload: Workload, links: Sequence[KVLink], prefill_router: Router,
                        decode_router: Router, *, progress: bool = False) -> DisaggRun:
    """Serve `workload` on the two pools (one link per prefill instance) until every request
    finished. ValueError for an empty workload or pool, InvalidRequestError for a request an
    instance could never serve, RuntimeError if an instance stalls."""
    if not len(workload):
        raise ValueError("the workload has no requests")
    if not prefill or not decode or len(links) != len(prefill):
        raise ValueError(f"disaggregation needs >= 1 prefill and >= 1 decode instance and one "
                         f"link per prefill instance, got {len(prefill)}, {len(decode)}, "
                         f"{len(links)}")
    if workload.followups:
        raise ValueError("follow-up turns (`Sessions`) are not run under "
                         "disaggregation yet: run them co-located (Single or Fleet layouts)")
    check_fleet_workload((*prefill, *decode), workload)
    env = simpy.Environment()
    with cyclic_gc_paused(), tqdm(total=len(workload), desc="simulate", unit="req",
                                  delay=PROGRESS_DELAY_S, disable=not progress) as bar:
        pre = FleetArrivals(env, [prefill_request(r) for r in workload.requests],
                            prefill_router, [r.scheduler for r in prefill])
        dec = Handoffs(env, decode_router, [r.scheduler for r in decode], len(workload))
        pre.loops = [make_loop(env, r, pre.inboxes[i], None, False) for i, r in enumerate(prefill)]
        dec.loops = [make_loop(env, r, dec.inboxes[i], bar, False) for i, r in enumerate(decode)]
        kv = KVHandoff(env, {r.rid: r for r in workload.requests}, links, dec, bar,
                       prefill[0].scheduler.model_info)
        for i, loop in enumerate(pre.loops):
            loop.on_finished = kv.on_prefilled(i)
        env.process(pre.arrivals())
        env.run(until=env.all_of([env.process(loop.engine()) for loop in pre.loops + dec.loops]))
        pre.close()
        dec.close()
    return DisaggRun([r.scheduler.trace for r in prefill], [r.scheduler.trace for r in decode],
                     pre.replica_of, dec.replica_of, kv.transfers)


def prefill_request(r: WorkloadRequest) -> WorkloadRequest:
    """The request as a prefill instance runs it: at most one new token."""
    p = r.sampling_params
    if p.max_new_tokens <= 1:
        return r
    params = dataclasses.replace(p, max_new_tokens=1, min_new_tokens=min(p.min_new_tokens, 1))
    return WorkloadRequest(r.rid, r.arrival_time, r.input_ids, params)


class Handover(NamedTuple):
    """A request as a decode instance receives it when its KV transfer ends
    (`arrival_time`): the prompt's KV and the first token the prefill instance sampled,
    which the request holds as an output already produced (`Scheduler.add_request`)."""

    request: WorkloadRequest
    first_token: int
    arrival_time: float

    @property
    def rid(self) -> str:
        return self.request.rid

    @property
    def input_ids(self) -> tuple[int, ...]:
        """The prompt (what the decode router and the pool's load read)."""
        return self.request.input_ids

    @property
    def sampling_params(self) -> SamplingParams:
        return self.request.sampling_params

    def to_req(self) -> Req:
        """The whole request (its max_new_tokens, min_new_tokens, stop ids) with the first
        token as output 0: its next sample is output 1, and finishing counts the first."""
        r = self.request
        return Req(r.rid, r.input_ids, r.sampling_params, arrival_time=self.arrival_time,
                   output_ids=[self.first_token])


class KVHandoff:
    """Takes each request a prefill instance finished over that instance's link to the
    decode pool, or counts it done when it ended at its first token."""

    def __init__(self, env: simpy.Environment, requests: dict[str, WorkloadRequest],
                 links: Sequence[KVLink], decode: Handoffs, bar: tqdm,
                 model: ModelInfo) -> None:
        self.env, self.requests, self.links, self.decode, self.bar = env, requests, links, decode, bar
        self.eos, self.vocab_size = frozenset(model.eos_token_ids), model.vocab_size
        self.busy = [simpy.Resource(env, capacity=1) for _ in links]
        self.transfers: dict[str, tuple[float, float]] = {}

    def on_prefilled(self, instance: int):
        def hook(done: list[Req]) -> None:
            for req in done:
                original = self.requests[req.rid]
                capped = req.finished_reason is not None and req.finished_reason.type == "length"
                if capped and not self.ends_at_first_token(original, req.output_ids[0]):
                    self.env.process(self._transfer(instance, original, req.output_ids[0]))
                else:
                    self.bar.update(1)
                    self.decode.close_one()
        return hook

    def ends_at_first_token(self, request: WorkloadRequest, token: int) -> bool:
        """Whether the whole request ends with its first token `token` (it wants one, or the
        token is an EOS or stop id it honours, or outside the vocabulary), as the scheduler
        decides it (`check_finished`). NOTE: the prefill instance cannot tell: its one-token
        cap is checked first, so it ends every request by length."""
        handover = Handover(request, token, self.env.now).to_req()
        return check_finished(handover, token, self.eos, self.vocab_size) is not None

    def _transfer(self, instance: int, request: WorkloadRequest, first_token: int):
        with self.busy[instance].request() as turn:
            yield turn
            start = self.env.now
            seconds = self.links[instance].transfer_time(len(request.input_ids))
            if seconds > 0:
                yield self.env.timeout(seconds)
        self.transfers[request.rid] = (start, self.env.now)
        self.decode.add(Handover(request, first_token, self.env.now))


class Handoffs:
    """The decode pool's arrivals: requests appear when their transfer ends and are routed
    then; the pool closes once every request of the workload was handed over or ended at
    its first token. The `FleetView` its router sees."""

    def __init__(self, env: simpy.Environment, router: Router, schedulers: Sequence[Scheduler],
                 expected: int) -> None:
        self.env, self.router, self.schedulers, self.left = env, router, schedulers, expected
        self.inboxes = [Inbox(self) for _ in schedulers]
        self.loops: list = []
        self.replica_of: dict[str, int] = {}

    @property
    def num_replicas(self) -> int:
        return len(self.schedulers)

    def close(self) -> None:
        """Drop the loops and inboxes once the run is over (as `FleetArrivals.close`)."""
        self.loops, self.inboxes = [], []

    def load(self, replica: int) -> SchedulerLoad:
        load, pending = self.loops[replica].load(), self.inboxes[replica].pending
        return load._replace(queued_requests=load.queued_requests + len(pending),
                             queued_tokens=load.queued_tokens
                             + sum(len(r.input_ids) for r in pending))

    def route_until(self, now: float) -> None:
        """Routing happens when a transfer ends (`add`): nothing to catch up on."""

    def next_arrival(self) -> float:
        """Unknown until a transfer ends: now while requests are still to come."""
        return math.inf if self.left == 0 else self.env.now

    def add(self, request: Handover) -> None:
        i = self.router.route(request, self)
        if not (isinstance(i, int) and 0 <= i < self.num_replicas):
            raise RuntimeError(f"decode router {self.router.name!r} sent request "
                               f"{request.rid!r} to instance {i!r}; there are {self.num_replicas}")
        self.replica_of[request.rid] = i
        self.inboxes[i].pending.append(request)
        self.loops[i].wake()
        self.close_one()

    def close_one(self) -> None:
        self.left -= 1
        if self.left == 0:
            for loop in self.loops:
                loop.wake()
