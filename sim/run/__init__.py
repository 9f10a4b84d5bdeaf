"""One simulated engine: the SimPy driver, the sim model runner, token sources, output lengths, `simulate` / `build_simulation`, replay and the online simulator's stepper (`SimStepper`)."""
