"""Seed module path of the decentralized topology."""
