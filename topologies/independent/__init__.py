"""Seed module path of the independent topology."""
