"""A trained policy's specs banked under its content identity and replayed from its card without the weights
(issue 53: the trained row of the headline table rebuilds from the committed bank)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from lemon.errors import BackendError, ConfigError
from lemon.llm.cache import SQLiteCache
from lemon.orchestrator.policy_card import CARD_FORMAT, card_of, policy_identity, read_card
from lemon.orchestrator.policy_prompt import write_prompt_style
from lemon.orchestrator.trained import TrainedOrchestrator
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from tests.cli.test_cli_core import assert_clean_error, lemon
from tests.evalcall import evaluate_kw
from tests.spec_strategies import LEVELS

ROLES = RoleLibrary.load()
TASK = "Tom has 2 apples and buys 3 more. How many apples does he have?"


def _fake_policy(folder: Path, weights: bytes = b"weights v1") -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_a_policy_is_named_by_its_content_not_its_path(tmp_path: Path) -> None:
    first = policy_identity(_fake_policy(tmp_path / "a"))
    assert first.startswith("policy:") and len(first) == 23
    assert policy_identity(_fake_policy(tmp_path / "b")) == first  # the same files elsewhere
    (tmp_path / "a" / "policy-card.json").write_text(card_of(tmp_path / "a").to_json())
    assert policy_identity(tmp_path / "a") == first  # a card written into the folder is not the policy
    write_prompt_style(tmp_path / "a", "terse")
    terse = policy_identity(tmp_path / "a")
    assert terse != first and card_of(tmp_path / "a").prompt_style == "terse"  # asked otherwise, answers otherwise
    assert policy_identity(_fake_policy(tmp_path / "c", b"weights v2")) != first


def test_a_policy_rewritten_in_place_is_hashed_again(tmp_path: Path) -> None:
    """The hash is remembered per file list, size and modification time (an evaluation asks twice): weights
    rewritten at the same path and size (as `lemon train` rewrites `final/`) are a new identity."""
    folder = _fake_policy(tmp_path / "p")
    first = policy_identity(folder)
    assert policy_identity(folder) == first
    weights = folder / "model.safetensors"
    before = weights.stat().st_mtime_ns
    weights.write_bytes(b"weights v3")  # same size, other bytes
    os.utime(weights, ns=(before + 10**9, before + 10**9))  # a clock coarser than the test cannot hide it
    assert policy_identity(folder) != first


def test_a_card_round_trips(tmp_path: Path) -> None:
    card = card_of(_fake_policy(tmp_path / "p"))
    path = tmp_path / "card.json"
    path.write_text(card.to_json())
    assert read_card(path) == card


@pytest.mark.parametrize(("content", "expected"), [
    ("not json", "Expecting value"),
    ('["a list"]', f"not a {CARD_FORMAT} object"),
    ('{"format": "lemon-policy-card/9", "model_id": "policy:0123456789abcdef"}', "not a lemon-policy-card/1"),
    (f'{{"format": "{CARD_FORMAT}", "model_id": "embedded:qwen"}}', "16 hex digits"),
    (f'{{"format": "{CARD_FORMAT}", "model_id": "policy:0123456789ABCDEF"}}', "16 hex digits"),
    (f'{{"format": "{CARD_FORMAT}", "model_id": 7}}', "16 hex digits"),
    (f'{{"format": "{CARD_FORMAT}", "model_id": "policy:0123456789abcdef", "prompt": "loud"}}',
     "unknown prompt style"),
    ("{" + " " * 5000 + "}", "larger than 4,096 bytes"),
    ("\udcff", "codec can't decode"),
])
def test_a_hostile_card_is_one_line_naming_the_fix(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "card.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(ConfigError, match=expected) as err:
        read_card(path)
    assert "\n" not in str(err.value) and "lemon cache card" in str(err.value)


def test_a_card_that_is_not_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "card.json").mkdir()
    with pytest.raises(ConfigError, match="policy card"):
        read_card(tmp_path / "card.json")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="policy card"):  # never blocks on a pipe
        read_card(fifo)


def test_the_cli_writes_the_card_of_a_policy_and_refuses_what_is_not_one(tmp_path: Path) -> None:
    policy = _fake_policy(tmp_path / "run" / "final")
    home = tmp_path / "home"
    out = lemon("cache", "card", str(tmp_path / "run"), str(tmp_path / "card.json"), home=home)  # a run: final/
    assert out.returncode == 0, out.stderr
    assert read_card(tmp_path / "card.json") == card_of(policy) and "trained:" in out.stdout
    assert_clean_error(lemon("cache", "card", str(tmp_path / "nothing"), str(tmp_path / "c.json"), home=home),
                       "does not exist")
    assert not (tmp_path / "c.json").exists()


def test_a_card_needs_the_cache_it_replays_from(tmp_path: Path) -> None:
    path = tmp_path / "card.json"
    path.write_text(card_of(_fake_policy(tmp_path / "p")).to_json())
    with pytest.raises(ConfigError, match="drop --no-cache"):
        TrainedOrchestrator(path, ROLES, LEVELS)


@pytest.mark.train
async def test_a_policys_specs_replay_from_its_card_without_the_weights(tmp_path: Path, policy_dir: Path) -> None:
    cache = SQLiteCache(tmp_path / "llm-cache.sqlite")
    live = TrainedOrchestrator(policy_dir, ROLES, LEVELS, max_new_tokens=24, cache=cache)
    written = await live.propose(TASK)
    card = tmp_path / "card.json"
    card.write_text(card_of(policy_dir).to_json())
    replayed = [await TrainedOrchestrator(card, ROLES, LEVELS, max_new_tokens=24, cache=cache).propose(TASK),
                await TrainedOrchestrator(policy_dir, ROLES, LEVELS, max_new_tokens=24, cache=cache,
                                          offline=True).propose(TASK)]
    for again in replayed:
        assert (again.raw, again.prompt_tokens, again.completion_tokens, again.source) == \
            (written.raw, written.prompt_tokens, written.completion_tokens, written.source)
        assert render_spec(again.spec).text == render_spec(written.spec).text
    with pytest.raises(BackendError, match=r"LLM cache \(the policy card card\.json .*lemon cache import"):  # a task
        # the bank lacks: no model to ask, and the error says what to import
        await TrainedOrchestrator(card, ROLES, LEVELS, max_new_tokens=24, cache=cache).propose("What is 7 + 5?")
    budget = TrainedOrchestrator(card, ROLES, LEVELS, max_new_tokens=16, cache=cache)
    with pytest.raises(BackendError, match="not in the LLM cache"):  # another reply limit is another request
        await budget.propose(TASK)


def _items(store: Path) -> list[tuple[object, ...]]:
    """Each item's answer and tokens (an agent's `cached` flag aside: the replay's are all from the bank)."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT item_id, seed, prediction, correct, tokens_json, total_tokens, "
                          "orchestrator_tokens, status FROM items ORDER BY item_id, seed").fetchall()
    return [(*row[:4], {a: {k: v for k, v in t.items() if k != "cached"} for a, t in json.loads(row[4]).items()},
             *row[5:]) for row in rows]


@pytest.mark.train
@pytest.mark.models
async def test_a_trained_row_rebuilds_from_the_exported_bank_and_its_card(
        tmp_path: Path, policy_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Evaluate the policy with its weights, export the LLM cache; on a fresh LEMON_HOME that has only the bank
    and the card, the same evaluation gives the same items (the same answers, the same tokens, the policy's own
    included), every call answered by the bank."""
    from lemon.llm.cache_file import export_cache, import_cache
    from lemon.paths import llm_cache_path

    kw = dict(pool="tiny", level="small", limit=1, data_dir=data_dir, max_tokens=24)
    await evaluate_kw("svamp", f"trained:{policy_dir}", store=tmp_path / "live.sqlite", **kw)
    bank, card = tmp_path / "bank.jsonl.gz", tmp_path / "card.json"
    export_cache(SQLiteCache(llm_cache_path()), bank)
    card.write_text(card_of(policy_dir).to_json())
    monkeypatch.setenv("LEMON_HOME", str(tmp_path / "another-machine"))
    import_cache(SQLiteCache(llm_cache_path()), bank)
    await evaluate_kw("svamp", f"trained:{card}", store=tmp_path / "replayed.sqlite", **kw)
    live, replayed = _items(tmp_path / "live.sqlite"), _items(tmp_path / "replayed.sqlite")
    assert live and replayed == live and live[0][6] > 0  # the policy's own tokens are counted, and replayed
    with sqlite3.connect(tmp_path / "replayed.sqlite") as db:
        flags = [t["cached"] for (row,) in db.execute("SELECT tokens_json FROM items")
                 for t in json.loads(row).values()]
    assert flags and all(flags)
