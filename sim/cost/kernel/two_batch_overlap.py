"""`exposed_alltoall`: the all-to-all seconds a step still pays under two-batch overlap
(SGLang's `--enable-two-batch-overlap`, after DeepSeek's inference design).

The batch runs as two micro-batches, each layer in four stages, one micro-batch computing
while the other communicates (SGLang's operation order: attention, dispatch, experts,
combine):

    stage 1: attention side of B  |  dispatch of A
    stage 2: experts of A         |  dispatch of B
    stage 3: experts of B         |  combine of A
    stage 4: attention side of A  |  combine of B    (the next layer's)

A stage lasts while either side runs. The communication kernels of an extend (DeepEP's
normal kernels) occupy `comm_sms` of the chip's SMs while they run, so the compute beside
them runs on the rest: a stage of compute c beside communication m takes
max(m, c + m * comm_sms / num_sms). Decode's low-latency kernels occupy no SMs (DeepSeek's
profile-data README: "the all-to-all communication during decoding does not occupy GPU
SMs"). Sources: DeepEP's `Buffer.num_sms` = 20 SMs for the normal kernels
(deepseek-ai/DeepEP deep_ep/buffer.py); the four-stage order, SGLang's two-batch overlap
(lmsys.org blog, 2025-05-05, "Two-batch Overlap"). Each micro-batch carries half of every
term. NOTE: applied to the step's totals over the layers, as if every layer were sparse; a
dense layer's compute (3 of DeepSeek-V3's 61) counts as room to hide communication in.
"""

from __future__ import annotations

DEEPEP_NORMAL_SMS = 20   # deep_ep.Buffer.num_sms, the normal kernels' default
DISPATCH_SHARE = 1 / 3   # dispatch sends fp8 (1 byte per value), combine bf16 (2 bytes)


def exposed_alltoall(attention_side: float, experts: float, alltoall: float,
                     sm_fraction: float) -> float:
    """Seconds beyond `attention_side + experts` (the step's compute) that the four stages
    take, for `alltoall` seconds of dispatch plus combine, whose kernels occupy
    `sm_fraction` of the SMs while they run."""
    dispatch, combine = alltoall * DISPATCH_SHARE, alltoall * (1 - DISPATCH_SHARE)
    a, e = attention_side, experts

    def stage(compute: float, comm: float) -> float:
        return max(comm, compute + comm * sm_fraction)

    stages = stage(a, dispatch) + stage(e, dispatch) + stage(e, combine) + stage(a, combine)
    return max(0.0, stages / 2 - a - e)
