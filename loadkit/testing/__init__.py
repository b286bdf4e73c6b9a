"""Helpers for tests, reports and benchmarks: synthetic run directories with known causes."""
