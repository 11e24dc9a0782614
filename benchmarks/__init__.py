"""Measurement scripts (run as ``python benchmarks/<name>.py``); they use the packages,
never tests/."""
