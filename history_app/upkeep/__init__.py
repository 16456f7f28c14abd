"""Upkeep of stored data: retention, re-redaction, annotations."""
