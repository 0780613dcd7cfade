"""Internal: the worker process — dispatchers, services and the supervisor."""
