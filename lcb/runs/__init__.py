"""Runs: the batch runner and its output directory, records and summaries, progress,
`lcb score` and the demo. (Code extraction, which teams and agents use, is `lcb.extract`.)"""
