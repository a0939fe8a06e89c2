"""Seed module path of the sequential topology."""
