"""Seed module path of the centralized topology."""
