"""Seed module path of the single topology."""
