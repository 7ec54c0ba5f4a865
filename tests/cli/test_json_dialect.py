"""The dialect's loose ends (issue 52, point 17): `--json` on eval, report and models prints one JSON object and
nothing else on stdout; a typo in `--level` is one line before any work starts; a missing store file is named as
such, with the command that makes one."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli_core import assert_clean_error, lemon
from tests.cli.test_run_output import POOL


def _pool(tmp_path: Path) -> Path:
    pool = tmp_path / "pool.yaml"
    pool.write_text(POOL)
    return pool


def _json(proc) -> dict:  # type: ignore[no-untyped-def, type-arg]
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    assert isinstance(data, dict)
    return data


def test_eval_report_and_models_print_one_json_object(tmp_path: Path, data_dir: Path, _isolated_home: Path) -> None:
    pool, store = _pool(tmp_path), tmp_path / "r.sqlite"
    run = _json(lemon("eval", "multiarith", "--method", "cot", "--pool", str(pool), "--limit", "2", "--data-dir",
                      str(data_dir), "--store", str(store), "--json", home=_isolated_home))
    assert run["computed"] == 2 and run["n_items"] == 2 and run["exit_status"] == 0 and run["store"] == str(store)
    assert 0.0 <= run["accuracy"] <= 1.0 and run["accuracy_std"] is None  # one seed: null, not NaN
    report = _json(lemon("report", "--store", str(store), "--json", home=_isolated_home))
    (shown,) = report["runs"]
    assert shown["run_id"] == run["run_id"] and shown["accuracy"] == run["accuracy"] and shown["rows"] == 2
    assert report["markdown"].startswith("# LEMON evaluation results") and report["comparisons"] == []
    models = _json(lemon("models", "--pool", str(pool), "--json", home=_isolated_home))
    assert models["pool"] == "scripted" and models["missing"] is False
    assert {m["model"]: m["levels"] for m in models["models"]} == {"s": ["small"], "m": ["medium"], "l": ["large"]}
    assert all(m["backend"] == "scripted" and m["present"] is None for m in models["models"])


def test_a_typo_in_level_is_one_line_before_any_work(tmp_path: Path, data_dir: Path, _isolated_home: Path) -> None:
    store = tmp_path / "r.sqlite"
    proc = lemon("eval", "multiarith", "--method", "cot", "--level", "mediun", "--pool", str(_pool(tmp_path)),
                 "--limit", "2", "--data-dir", str(data_dir), "--store", str(store), home=_isolated_home)
    assert_clean_error(proc, "--level 'mediun' is not a level of pool")
    assert "small, medium, large" in proc.stderr
    assert [ln for ln in proc.stderr.splitlines() if ln.strip()] == [proc.stderr.strip()]  # one line, no bar
    assert not store.exists()  # nothing started: no store, no run


def test_a_missing_store_file_says_how_to_make_one(tmp_path: Path, data_dir: Path, _isolated_home: Path) -> None:
    missing = tmp_path / "missing.sqlite"
    for home_store in (False, True):  # whatever the default store holds
        if home_store:
            _json(lemon("eval", "multiarith", "--method", "cot", "--pool", str(_pool(tmp_path)), "--limit", "1",
                        "--data-dir", str(data_dir), "--json", home=_isolated_home))
        for target in (str(missing), "missing.sqlite"):
            proc = lemon("view", target, "--file", str(tmp_path / "v.html"), home=_isolated_home)
            assert_clean_error(proc, f"no file {target}")
            assert f"lemon eval BENCHMARK --method METHOD --store {target}" in " ".join(proc.stderr.split())
            assert "lemon report" not in proc.stderr
    proc = lemon("view", "nope", "--store", str(_isolated_home / "results.sqlite"), home=_isolated_home)
    assert_clean_error(proc, f"list its runs with `lemon runs --store {_isolated_home / 'results.sqlite'}`")
