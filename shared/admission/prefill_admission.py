"""`PrefillAdmission`: one admission round, the waiting requests the next prefill takes
(SGLang's `get_new_batch_prefill` loop, semantics §5).

The chunked request, if any, goes first (its next chunk); then the waiting queue in policy
order, until a request does not fit, the request rows run out or the budgets do. The round
owns no scheduler state: it reads what it is given and says in its result whether the
running batch was found full; the scheduler owns the queue, the chunked request and the
flag.
"""

from __future__ import annotations

from typing import NamedTuple

from shared.admission.prefill_adder import AddReqResult, PrefillAdder
from shared.admission.schedule_policy import SchedulePolicy
from shared.batch.schedule_batch import ScheduleBatch
from shared.config.engine_config import EngineConfig
from shared.memory.kv_memory import KVMemory
from shared.request.req import Req


class Admission(NamedTuple):
    """What one round admitted."""

    adder: PrefillAdder      # can_run_list: the admitted requests; new_chunked_req: one cut now
    chunked_req: Req | None  # the request chunked before this round, None once its last chunk is in
    full: bool               # the round found the running batch full (sets batch_is_full)


class PrefillAdmission:
    """Admission rounds over `mem`'s KV budgets, in `policy`'s order, with `config`'s
    prefill and chunk budgets and mixing switch."""

    def __init__(self, mem: KVMemory, policy: SchedulePolicy, config: EngineConfig) -> None:
        self.mem = mem
        self.policy = policy
        self.config = config

    def admit(self, waiting_queue: list[Req], running_batch: ScheduleBatch | None,
              chunked_req: Req | None, new_token_ratio: float, allocatable: int) -> Admission:
        """One round over `waiting_queue` (sorted in place by the policy) beside the
        running batch; `allocatable`: request rows free for new requests."""
        self.policy.calc_priority(waiting_queue)
        adder = self._adder(running_batch, new_token_ratio)
        if chunked_req is not None:
            chunked_req.init_next_round_input(None)
            chunked_req = adder.add_chunked_req(chunked_req)
            if chunked_req is not None and chunked_req not in adder.can_run_list:
                return Admission(adder, chunked_req, False)  # no KV for its next chunk now
        return Admission(adder, chunked_req,
                         self._add_waiting(adder, waiting_queue, allocatable + len(adder.can_run_list)))

    def _adder(self, running_batch: ScheduleBatch | None, new_token_ratio: float) -> PrefillAdder:
        running = running_batch.reqs if running_batch else []
        remaining = running_batch.remaining_new_tokens() if running_batch else None
        mix = self.config.enable_mixed_chunk and bool(running)
        mixed_kv = running_batch.new_tokens_required_next_decode() if mix else 0
        return PrefillAdder(self.mem, running, new_token_ratio, self.config.max_prefill_tokens,
                            self.config.chunk_size, len(running) if mix else 0,
                            running_remaining=remaining, mixed_decode_kv=mixed_kv)

    def _add_waiting(self, adder: PrefillAdder, waiting_queue: list[Req], allocatable: int) -> bool:
        """Add waiting requests in order while they fit; True if the running batch is full
        (no request row left, or out of KV budget)."""
        for req in waiting_queue:
            if len(adder.can_run_list) >= allocatable:
                return True
            req.init_next_round_input(self.mem.tree_cache)
            res = adder.add_one_req(req)
            if res != AddReqResult.CONTINUE:
                return res == AddReqResult.NO_TOKEN
        return False
