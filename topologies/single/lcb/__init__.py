"""Seed module path of the single team on LiveCodeBench."""
