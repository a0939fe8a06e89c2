"""Seed module path of the decentralized team on LiveCodeBench."""
