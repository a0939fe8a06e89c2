"""Seed module path of the sequential team on LiveCodeBench."""
