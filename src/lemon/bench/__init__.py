"""Benchmarks: datasets, splits, answer extraction, sandbox, baselines as specs, evaluation, reports."""
