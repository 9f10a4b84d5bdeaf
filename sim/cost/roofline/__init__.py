"""The roofline cost model: each step priced as max(FLOPs / peak, bytes / bandwidth) per operator, plus its latency terms and engine overheads."""
