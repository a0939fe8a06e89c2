"""Seed module path of the centralized team on LiveCodeBench."""
