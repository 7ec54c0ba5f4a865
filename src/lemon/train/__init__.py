"""Training the orchestrator: SFT warm start, orchestration-level GRPO, localized counterfactual credit.

Importing this package sets ``OMP_WAIT_POLICY=PASSIVE`` unless already set (it must happen before torch is
imported to take effect). On the 2-core machines this project trains on, other processes (the llama.cpp
workers, parallel jobs) compete for the cores; OpenMP's default spin-waiting then made HF generation 20x
slower (measured: 2x96 sampled tokens took 340 s instead of 16 s). Passive waiting costs nothing when idle.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
