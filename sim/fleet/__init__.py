"""Several engines: fleets behind a router, prefill/decode disaggregation, the KV link between them and their results."""
