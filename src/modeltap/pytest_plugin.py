"""pytest plugin (entry point ``pytest11``): fixtures that run modeltap for one test."""

from __future__ import annotations
