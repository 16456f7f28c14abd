"""Intake: the endpoints that take runs in (native JSON, OTLP) and the write service."""
