"""Which waiting requests the next prefill takes: the schedule policy, `PrefillAdder`'s budgets and `PrefillAdmission`."""
