"""The conformance kit: Hypothesis strategies (`strategies.py`), `check_conformance` /
`check_agreement` (`kit.py`) and the shadow KV model (`shadow_kv.py`), for anyone's runner.
This face hands on the kit's public names, so users write `from sim.conformance import ...`."""

from sim.conformance.kit import (
    Agreement,
    AgreementError,
    ConformanceCase,
    ConformanceError,
    Divergence,
    PushTokenSource,
    SpecCheckingRunner,
    SpecObservation,
    SpecProbe,
    StepClock,
    assert_traces_agree,
    cases,
    check_agreement,
    check_conformance,
    engine_configs,
    first_divergence,
    min_total_tokens,
    replay_runner,
    sampling_params,
    workloads,
)

__all__ = [
    "Agreement", "AgreementError", "ConformanceCase", "ConformanceError", "Divergence",
    "PushTokenSource", "SpecCheckingRunner", "SpecObservation", "SpecProbe", "StepClock",
    "assert_traces_agree", "cases", "check_agreement", "check_conformance", "engine_configs",
    "first_divergence", "min_total_tokens", "replay_runner", "sampling_params", "workloads",
]
