"""The scheduler's loop: `Scheduler`, its load view, batch results, decode runs, failed steps, the step recorder, the new-token ratio and the `ModelRunner` contract."""
