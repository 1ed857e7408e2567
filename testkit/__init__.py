"""Helpers that start real HTDA nodes for tests and benchmarks (no mocks)."""
