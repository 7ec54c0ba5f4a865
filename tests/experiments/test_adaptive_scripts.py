"""The resumable experiment scripts of issues 24 and 25, run end to end on the scripted test-double pool:
the sample bank, the anchors answered from it, the stop-rule table replayed offline, the six-benchmark table."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.evaluation.test_cli import _rows, scripted_pool_yaml

ROOT = Path(__file__).parents[2]


def _env(tmp: Path, data_dir: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "LEMON_HOME": str(tmp / "home"), "LEMON_DATA_DIR": str(data_dir),
            "COLUMNS": "200", "BANK": str(tmp / "no-bank.jsonl.gz"), **extra}


def test_the_bank_then_the_anchors_then_the_offline_table(tmp_path: Path, data_dir: Path) -> None:
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", 0.0)
    env = _env(tmp_path, data_dir, POOL=str(pool), BENCHES="svamp", LIMIT="2", SEEDS="1",
               STORE=str(tmp_path / "s.sqlite"))
    script = ["bash", str(ROOT / "experiments" / "adaptive_cpu.sh"), "bank", "anchors"]
    first = subprocess.run(script, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert first.returncode == 0, first.stderr[-2000:]
    again = subprocess.run(script, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert again.returncode == 0 and again.stdout.count("computed 0") == 6, again.stdout[-2000:]
    log = (tmp_path / "s.sqlite.runs.log").read_text()
    assert "commit=" in log and all(f"--method {m} " in log for m in ("esc", "asc", "gate"))
    table = subprocess.run([sys.executable, str(ROOT / "experiments" / "stop_rules_table.py"), "--store",
                            str(tmp_path / "s.sqlite"), "--benchmarks", "svamp", "--pool", str(pool)],
                           env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert table.returncode == 0, table.stderr[-2000:]
    assert "svamp `test`: 2 (item, seed) pairs (seed 0: 2 items)" in table.stdout
    assert "| agree 2 of 5 (esc) |" in table.stdout and "| per-item oracle (upper bound) |" in table.stdout
    assert "| sure -30 + agree 2 of 5 |" in table.stdout  # its scores banked by the anchors' `gate`
    plain = subprocess.run([*table.args, "--no-gates"], env=env, capture_output=True, text=True, timeout=300,
                           cwd=ROOT)  # the teams a default for any pool may use: no logprob gate
    assert plain.returncode == 0 and "| sure " not in plain.stdout, plain.stderr[-2000:]
    esc_row = next(line for line in table.stdout.splitlines() if line.startswith("| agree 2 of 5 (esc) |"))
    assert esc_row in plain.stdout.splitlines()  # the other teams replay exactly as before
    # program voters: `programs` banks pot-esc's, then mixed orders replay offline (a P voter the bank lacks
    # would be an error), each program run in the real sandbox
    programs = subprocess.run(["bash", str(ROOT / "experiments" / "adaptive_cpu.sh"), "programs"], env=env,
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert programs.returncode == 0 and "--method pot-esc " in log + (tmp_path / "s.sqlite.runs.log").read_text()
    mixed = subprocess.run([*table.args, "--mixed", "P", "PCCCC", "CPCCC"], env=env, capture_output=True,
                           text=True, timeout=300, cwd=ROOT)
    assert mixed.returncode == 0, mixed.stderr[-2000:]
    assert all(f"| mixed {o} |" in mixed.stdout for o in ("P", "PCCCC", "CPCCC"))


def _one_row_bank(tmp: Path) -> Path:
    """An exported LLM cache holding one completion (what experiments/bank/ commits, in small)."""
    from lemon.llm.base import Completion
    from lemon.llm.cache import SQLiteCache
    from lemon.llm.cache_file import export_cache

    cache = SQLiteCache(tmp / "source.sqlite")
    cache.put("0" * 64, Completion("banked", 1, 1, 0.0, "m"))
    export_cache(cache, tmp / "bank.jsonl.gz")
    cache.close()
    return tmp / "bank.jsonl.gz"


def test_the_six_benchmark_table_runs_every_method_and_reports(tmp_path: Path, data_dir: Path) -> None:
    """The one command of issue 25, on the scripted pool: the baselines, then its own policies' training (the
    TRAIN-item banks into a store of their own, then SFT, which the scripted workers fail: no banked team is
    ever right), then the orchestrators and the multi-agent baselines all the same; the exit status says that
    the training failed."""
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", 0.0)
    bank = _one_row_bank(tmp_path)
    env = _env(tmp_path, data_dir, POOL=str(pool), BENCHES="multiarith", LIMIT="2", SEEDS="1", BANK=str(bank),
               JOBS="2", THREADS="1",  # two processes share each evaluation's items through the store's claims
               TRAIN_LIMIT="2", N_TRAIN="2", N_EVAL="1", POLICY_RUNS=str(tmp_path / "policy"),
               MAX_TOKENS_MULTIARITH="48")  # a benchmark's reply limit, overridden
    res = subprocess.run(["bash", str(ROOT / "experiments" / "six_benchmarks.sh"), str(tmp_path / "t.sqlite")],
                         env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert res.returncode == 1, res.stderr[-2000:]
    assert "imported 1 completions and 0 scores" in res.stdout  # the committed bank seeds the cache first
    assert "the teacher wrote no usable spec" in res.stderr
    assert "training the policies failed (above); the table has the policies that exist: none" in res.stderr
    train_log = (tmp_path / "t-train.sqlite.runs.log").read_text()
    assert all(f"--method {m} " in train_log for m in ("sc-cot", "sc-pot")) and "--split train" in train_log
    log = (tmp_path / "t.sqlite.runs.log").read_text()
    methods = ("vanilla", "cot", "sc-cot", "esc", "asc", "gate", "template", "chain", "tree", "complete", "random")
    positions = [log.index(f"--method {m} ") for m in methods]
    assert positions == sorted(positions)  # the orchestrators before the costly multi-agent baselines
    assert "--split train" not in log  # the training banks stay out of the table's store
    assert log.count("--max-tokens 48") == len(log.splitlines())
    assert all(re.match(r"\S+Z commit=[0-9a-f]{7,} lemon eval .* jobs=2 threads=1$", line) for line in log.splitlines())
    assert "multiarith" in res.stdout and "template" in res.stdout
    assert "Paired test: template vs " in res.stdout  # the orchestrator against the best fixed baseline
    report = (tmp_path / "t-report.md").read_text()  # the Markdown of the report, beside the store
    assert "| template | test | 2 | 1 |" in report  # complete: every item once, whichever process ran it
    assert "### Where the answer was lost (multiarith" in report  # --replies: each agent's reply graded alone
    # the headline's pooled tests (docs/results.md), the per-kind rule among them
    assert "### Pooled over the benchmarks: template against number=esc/choice=esc/code=exsc" in report


def test_the_tables_parts_run_alone_and_a_bad_part_is_one_line(tmp_path: Path, data_dir: Path) -> None:
    """PARTS runs some of the table (a second invocation fills an idle core while the first trains): only the
    named parts' evaluations are logged, and an unknown part stops before anything runs, naming the good ones."""
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", 0.0)
    script = ["bash", str(ROOT / "experiments" / "six_benchmarks.sh"), str(tmp_path / "t.sqlite")]
    env = _env(tmp_path, data_dir, POOL=str(pool), BENCHES="multiarith", LIMIT="1", SEEDS="1")
    bad = subprocess.run(script, env={**env, "PARTS": "topologies tables"}, capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "six_benchmarks: unknown part 'tables' in PARTS; use some of: "
        "baselines policies orchestrators topologies report"]
    assert not (tmp_path / "t.sqlite.runs.log").exists()
    res = subprocess.run(script, env={**env, "PARTS": "orchestrators topologies", "TRAINED": "auto",
                                      "POLICY_RUNS": str(tmp_path / "no-policies")},
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    log = (tmp_path / "t.sqlite.runs.log").read_text()
    logged = [line.split("--method ")[1].split()[0] for line in log.splitlines()]
    assert logged == ["template", "chain", "tree", "complete", "random"]  # no policy trained, none to evaluate
    assert "Paired test" not in res.stdout  # the report is a part of its own


def test_the_tables_trained_rows_come_from_the_committed_cards(tmp_path: Path, data_dir: Path) -> None:
    """TRAINED=bank evaluates the committed cards (experiments/bank/policies/), named as a user writes them from
    the repository root; on a pool the bank has no spec of theirs for, the card refuses in one line, draws none."""
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", 0.0)
    env = _env(tmp_path, data_dir, POOL=str(pool), BENCHES="multiarith", LIMIT="1", SEEDS="1",
               PARTS="orchestrators", TRAINED="bank", BANK=str(_one_row_bank(tmp_path)))
    res = subprocess.run(["bash", str(ROOT / "experiments" / "six_benchmarks.sh"), str(tmp_path / "t.sqlite")],
                         env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    log = (tmp_path / "t.sqlite.runs.log").read_text()
    cards = sorted(p.name for p in (ROOT / "experiments" / "bank" / "policies").glob("*.json"))
    assert cards and [line.split("--method ")[1].split()[0] for line in log.splitlines()][1:2] == [
        f"trained:experiments/bank/policies/{cards[0]}"]
    assert res.returncode == 3, res.stderr[-2000:]  # the item is an error, never a drawn spec
    assert (f"the policy card {cards[0]} answers only from it); import the bank its specs were exported to"
            in res.stdout.replace("\n", " ")), res.stdout[-2000:]
    assert "Traceback" not in res.stderr + res.stdout


def test_the_choice_team_study_runs_its_stages_on_dev_items(tmp_path: Path, data_dir: Path) -> None:
    """experiments/choice_team.sh, on the scripted pool at one item: the 5-voter bank, the anchors, agree 2 of 3
    and the template, each on AQuA's and MMLU's `dev` items (never the table's), each logged before it runs."""
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", 0.0)
    env = _env(tmp_path, data_dir, POOL=str(pool), LIMIT="1")
    res = subprocess.run(["bash", str(ROOT / "experiments" / "choice_team.sh"), str(tmp_path / "c.sqlite")],
                         env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = (tmp_path / "c.sqlite.runs.log").read_text().splitlines()
    assert lines and all("--split dev" in line and "--limit 1 " in line for line in lines)
    for bench in ("aqua", "mmlu"):
        logged = [line.split("--method ")[1].split()[0] for line in lines if f"lemon eval {bench} " in line]
        assert logged[0] == "sc-cot" and logged[-2:] == ["esc", "template"], logged


def _default_sigint() -> None:
    """In the child before exec: SIGINT at its default, as for a script started at a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_stops_a_scripts_parallel_evaluations(tmp_path: Path, data_dir: Path) -> None:
    """`lemon_jobs` (experiments/common.sh) starts JOBS `lemon eval` processes in the background, which bash
    starts with SIGINT ignored: Ctrl-C ended the script and left them running. Now the script hands them TERM,
    which `lemon` takes as Ctrl-C: each says what it keeps, releases its claims and exits; the script exits 130.
    Deterministic: after one call each, the scripted workers wait while `hold` exists."""
    store, hold = tmp_path / "s.sqlite", tmp_path / "hold"
    hold.touch()
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", 0.0, hold=f"hold_file: '{hold}', hold_after_calls: 1")
    script = (f"source {ROOT / 'experiments' / 'common.sh'}; lemon_jobs eval multiarith --method vanilla "
              f"--pool {pool} --level small --limit 20 --store {store} --concurrency 1")
    proc = subprocess.Popen(["bash", "-c", script], env=_env(tmp_path, data_dir, JOBS="2"), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_default_sigint,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(_rows(store)) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no 2 rows while the workers hold"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        deadline = time.monotonic() + 30
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _group_alive(proc.pid), "an evaluation outlived the interrupted script"
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        hold.unlink(missing_ok=True)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert err.decode().count("interrupted: every finished item is saved") == 2, err.decode()[-2000:]
    db = sqlite3.connect(store)
    assert db.execute("SELECT COUNT(*) FROM claims").fetchone() == (0,)  # nothing left for a resumed run to wait on
    db.close()
