"""`BatchShape`: what a cost model needs to know about one forward, and nothing else.

Derivable from a live `ForwardBatch` (sim prices what the scheduler built) and from a recorded
`StepRecord` (a trace is re-priced), so both paths see one definition. Per request it holds
the cached prefix length, the new (extend) length and the sequence length; decode requests
are 1-token extends (prefix = seq_len - 1). `lm_head_rows` counts the pruned rows that become
logits. `padded_batch_size` > batch size means CUDA-graph padding: each padding row is priced
as a decode row with seq_len 1 (it runs through every layer and the LM head).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from shared.batch.attention_layout import PaddedAttentionWork, padded_attention_work
from shared.batch.forward_mode import ForwardMode

if TYPE_CHECKING:
    from shared.batch.forward_batch import ForwardBatch
    from shared.trace.step_record import StepRecord


class _Totals(NamedTuple):
    kv_tokens: int        # sum of seq_lens
    attention_pairs: int  # causal query-key pairs
    one_token_rows: int   # requests with extend == 1


@dataclass(frozen=True)
class BatchShape:
    forward_mode: ForwardMode
    num_tokens: int                  # real token rows (extend_num_tokens, or B for decode)
    prefix_lens: tuple[int, ...]     # [B] cached tokens before this forward
    extend_lens: tuple[int, ...]     # [B] tokens this forward computes
    seq_lens: tuple[int, ...]        # [B] prefix + extend
    lm_head_rows: int                # len(pruned_rows)
    padded_batch_size: int           # >= B; > B only for graph-padded decode
    _totals: _Totals = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        p, e, s = (np.asarray(getattr(self, n), dtype=np.int64)
                   for n in ("prefix_lens", "extend_lens", "seq_lens"))
        self._validate(p, e, s)
        for name, arr in (("prefix_lens", p), ("extend_lens", e), ("seq_lens", s)):
            object.__setattr__(self, name, tuple(arr.tolist()))
        # NOTE: totals are computed once here, so pricing a shape is plain arithmetic.
        object.__setattr__(self, "_totals", _Totals(
            int(s.sum()), int(np.sum(e * p + e * (e + 1) // 2)), int(np.count_nonzero(e == 1))))

    def _validate(self, p: np.ndarray, e: np.ndarray, s: np.ndarray) -> None:
        b = len(s)
        if not len(p) == len(e) == b:
            raise ValueError(f"BatchShape: {len(p)} prefix, {len(e)} extend and {b} seq lengths; "
                             "need one of each per request")
        if (p < 0).any() or (e < 1).any():
            raise ValueError("BatchShape: need prefix >= 0 and extend >= 1 for every request")
        if (p + e != s).any():
            raise ValueError("BatchShape: seq_len must equal prefix + extend for every request")
        if self.num_tokens != int(e.sum()):
            raise ValueError(f"BatchShape: num_tokens {self.num_tokens} != sum of extend "
                             f"lengths {int(e.sum())}")
        if not 0 <= self.lm_head_rows <= self.num_tokens:
            raise ValueError(f"BatchShape: lm_head_rows {self.lm_head_rows} outside "
                             f"[0, {self.num_tokens}]")
        if self.padded_batch_size < b:
            raise ValueError(f"BatchShape: padded_batch_size {self.padded_batch_size} < "
                             f"batch size {b}")

    @classmethod
    def build(cls, forward_mode: ForwardMode | str, seq_lens: Any, prefix_lens: Any = None,
              lm_head_rows: int | None = None, padded_batch_size: int | None = None,
              num_tokens: int | None = None) -> BatchShape:
        """A shape from seq lengths; prefix lengths default to seq_len - 1 (decode rows),
        LM-head rows to one per request. A given `num_tokens` is checked against the lengths."""
        seq = np.asarray(seq_lens, dtype=np.int64)
        prefix = seq - 1 if prefix_lens is None else np.asarray(prefix_lens, dtype=np.int64)
        if prefix.shape != seq.shape:
            raise ValueError(f"BatchShape: {len(prefix)} prefix lengths for {len(seq)} requests")
        mode = ForwardMode[forward_mode] if isinstance(forward_mode, str) else forward_mode
        tokens = int((seq - prefix).sum()) if num_tokens is None else int(num_tokens)
        return cls(mode, tokens, prefix, seq - prefix, seq,
                   len(seq) if lm_head_rows is None else lm_head_rows,
                   len(seq) if padded_batch_size is None else padded_batch_size)

    @classmethod
    def from_forward_batch(cls, fb: ForwardBatch, padded_batch_size: int | None = None
                           ) -> BatchShape:
        """The shape of a live batch; `padded_batch_size` is the size the runner ran it at.
        NOTE: trusted (the spec built the batch), so it skips validation: this runs once
        per simulated step."""
        seq = fb.seq_lens
        if fb.forward_mode.is_decode_or_idle():
            return cls.decode(seq, padded_batch_size or fb.batch_size, fb.forward_mode)
        return cls.extend_trusted(fb.forward_mode, seq.tolist(), fb.extend_prefix_lens.tolist(),
                                  len(fb.logit_rows.pruned_rows),
                                  padded_batch_size or fb.batch_size, len(fb.input_ids))

    @classmethod
    def extend_trusted(cls, mode: ForwardMode, seq_lens: list[int], prefix_lens: list[int],
                       lm_head_rows: int, padded_batch_size: int, num_tokens: int) -> BatchShape:
        """An extend batch from its lengths (lists of ints), unchecked: for batches the spec
        built (a live one, a step of a trace this process recorded)."""
        # NOTE: an extend batch holds few requests: the totals in Python ints over the tuples
        # the shape keeps cost less than numpy's per-call overhead.
        seq, prefix = tuple(seq_lens), tuple(prefix_lens)
        extend = tuple(s - p for s, p in zip(seq, prefix, strict=True))
        totals = _Totals(sum(seq), sum(e * p + e * (e + 1) // 2 for e, p in zip(extend, prefix, strict=True)),
                         extend.count(1))
        return cls._trusted(mode, num_tokens, prefix, extend, seq, lm_head_rows,
                            padded_batch_size, totals)

    @classmethod
    def decode(cls, seq_lens: np.ndarray, padded_batch_size: int,
               mode: ForwardMode = ForwardMode.DECODE) -> BatchShape:
        """A live decode batch ([B] int64 seq_lens, this step's token included): one token
        and one logit row per request. Trusted, like from_forward_batch."""
        kv, b = int(seq_lens.sum()), len(seq_lens)  # decode rows: prefix = seq - 1, extend = 1
        return cls._trusted(mode, b, tuple((seq_lens - 1).tolist()), (1,) * b,
                            tuple(seq_lens.tolist()), b, padded_batch_size, _Totals(kv, kv, b))

    @classmethod
    def _trusted(cls, mode, tokens, prefix, extend, seq, lm_rows, padded, totals) -> BatchShape:
        """A shape from tuples of ints and its totals, unchecked."""
        shape = object.__new__(cls)
        for name, value in (("forward_mode", mode), ("num_tokens", tokens),
                            ("prefix_lens", prefix), ("extend_lens", extend),
                            ("seq_lens", seq), ("lm_head_rows", lm_rows),
                            ("padded_batch_size", padded), ("_totals", totals)):
            object.__setattr__(shape, name, value)
        return shape

    @classmethod
    def from_step_record(cls, rec: StepRecord) -> BatchShape:
        """The shape of a recorded step (its padded_batch_size as recorded)."""
        mode = ForwardMode[rec.forward_mode]
        prefix = None if mode.is_decode_or_idle() else rec.extend_prefix_lens
        return cls.build(mode, rec.seq_lens, prefix, len(rec.pruned_rows),
                         rec.padded_batch_size or len(rec.seq_lens), len(rec.input_ids))

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens)

    @property
    def padding_rows(self) -> int:
        return self.padded_batch_size - self.batch_size

    @property
    def rows(self) -> int:
        """Token rows through the decoder layers, padding included."""
        return self.num_tokens + self.padding_rows

    @property
    def decode_rows(self) -> int:
        """Requests computing one token (decode, or 1-token extends), padding included."""
        return self._totals.one_token_rows + self.padding_rows

    @property
    def kv_tokens(self) -> int:
        """KV entries attention reads (per layer): every request's whole sequence."""
        return self._totals.kv_tokens + self.padding_rows

    @property
    def attention_pairs(self) -> int:
        """Causal query-key pairs scored (per head and layer), padding included."""
        return self._totals.attention_pairs + self.padding_rows

    @property
    def padded_attention(self) -> PaddedAttentionWork:
        """Keys gathered and pairs scored by a dense padded attention layout
        (`shared.batch.attention_layout`, exec's torch executor), padding rows as 1-key decodes."""
        work = padded_attention_work(np.asarray(self.seq_lens), np.asarray(self.extend_lens))
        return PaddedAttentionWork(work.gathered_keys + self.padding_rows,
                                   work.padded_pairs + self.padding_rows)

    @property
    def padded_lm_head_rows(self) -> int:
        """Rows through the LM head: the pruned rows plus padding rows."""
        return self.lm_head_rows + self.padding_rows
