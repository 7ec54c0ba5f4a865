"""The benchmarks: one file per benchmark (its items, splits, prompt, answer kind, extractor and grader as one
object), the `Benchmark` protocol they share (`base`), and the registry that names them (`registry`).

Shared pieces have their own modules: `answers` (number and choice answers), `extract` (the pure extractors),
`files` (guarded readers of upstream data files), `splits` (named, disjoint, seeded splits). Nothing here knows
the harness that evaluates a benchmark (`lemon.evaluation`) or the trainer (`lemon.train`).
"""
