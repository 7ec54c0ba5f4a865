"""Executes a validated spec as a DAG against a pool: node cache, budgets, orchestration traces."""
