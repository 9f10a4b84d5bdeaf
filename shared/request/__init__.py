"""A request as the spec holds it: `SamplingParams`, `Req`, validation of what a client sends, and `FinishReason`."""
