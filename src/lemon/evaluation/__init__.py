"""The evaluation harness: a method (a fixed team or an orchestrator) on a benchmark split, item by item.

`methods` and `baselines` turn a `--method` into a spec writer; `item` is the unit of work (one item, one
seed); `evaluate` (local) and `scale` (Ray) drive it; `store` keeps every row and trace; `report` turns runs
into tables, paired tests and plots. It knows benchmarks only through the `lemon.benchmarks` protocol.
"""
