"""Aggregation and publishing: RESULTS.md and results.json from phase outputs (never audio)."""
