"""The seed's module paths, kept as thin entry points into the `lcb` command."""
