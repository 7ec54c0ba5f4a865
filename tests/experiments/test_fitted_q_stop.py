"""experiments/fitted_q_stop.py: fitted Q-iteration over stop, prose and program voters, on a synthetic bank (a test
double of the data, not of the code) shaped as the number benchmarks' bank: program voters cheaper and surer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.experiments import EXPERIMENTS, load_script
from tests.train.test_stop_learning import _two_kind_bank

load_script("learn_stop_rule")  # the script it imports, as Python finds it beside it
fq = load_script("fitted_q_stop")


def test_it_learns_to_open_with_a_program_and_check_it_and_not_when_switched_off() -> None:
    train, test = _two_kind_bank(60, 7), _two_kind_bank(60, 8)
    learned = fq.outcomes(fq.fit_q(train, price=0.1), test)
    zeros = np.zeros(len(fq.features(fq.moment(train[0], [], 5, 5))))
    off = fq.outcomes(fq.QController(zeros, zeros, zeros), test)  # training off: no action is worth more
    right, tokens = learned[:, 0].mean(), learned[:, 1].mean()
    assert right > off[:, 0].mean() + 0.15 and right > 0.85  # one prose voter is right 60 %, one program 80 %
    assert tokens < 0.35 * 1500  # the 5-vote's 1,500: it checks programs against each other, not prose


def test_a_draws_file_with_test_items_is_refused_in_one_line(tmp_path: Path) -> None:
    line = {"key": "gsm8k/test/0@0", "kind": "number", "chars": 10, "prose": [], "programs": []}
    (tmp_path / "d.jsonl").write_text(json.dumps(line) + "\n")
    done = subprocess.run([sys.executable, str(EXPERIMENTS / "fitted_q_stop.py"), "--draws", str(tmp_path / "d.jsonl")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "training draws only" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
