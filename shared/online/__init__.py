"""Online serving: the `OnlineEngine` protocol, the engine's inbox, its thread and the arrival buffer."""
