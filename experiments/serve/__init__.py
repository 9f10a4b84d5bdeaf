"""`batchtwin serve`: an OpenAI-compatible HTTP server over any `shared.online.online_engine`."""
