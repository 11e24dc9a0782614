"""Builders and fakes shared by benchmarks/ and tests/ (tests may import them;
the packages never do)."""
