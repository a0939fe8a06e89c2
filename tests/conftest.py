"""Shared pytest configuration. Helpers live in tests/helpers_*.py and are imported explicitly."""
