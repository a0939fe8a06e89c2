"""Runs: the batch runner and its output directory, records and summaries, progress, code
extraction, `lcb score` and the demo."""
