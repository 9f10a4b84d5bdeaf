"""`Engine`: the real executor around the spec's scheduler (generate, streams, online runs, the overlap worker, output tracking, TP workers) and its stepper for the serving loop (`ExecStepper`)."""
