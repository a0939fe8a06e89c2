"""Probe problems and programs for the differential suite (default grader vs official grader)."""
