"""Seed module path of the optimization protocol."""
