"""Seed module path of the independent team on LiveCodeBench."""
