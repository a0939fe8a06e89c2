"""The seed's optimizer module path, kept as a thin entry point."""
