"""Reliability suite: bad input, faults and load (docs/RELIABILITY.md has the figures)."""
