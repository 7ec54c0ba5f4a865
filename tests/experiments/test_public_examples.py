"""experiments/public_examples.py: a code team's programs run on the prompt's own examples, and the rules that
pick the first program passing them."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from lemon.benchmarks.base import Item
from lemon.benchmarks.registry import load_split
from lemon.evaluation.store import ItemRow, ResultsStore
from tests.experiments import load_script

examples = load_script("public_examples")


def _item(data_dir: Path, item_id: str) -> Item:
    return next(i for i in load_split("humaneval", "test", data_dir) if i.id == item_id)


def test_the_examples_are_the_task_text_s_as_the_runtime_gate_reads_them(data_dir: Path) -> None:
    close = examples.public_examples(_item(data_dir, "HumanEval/0"))
    assert close is not None and close.entry == "has_close_elements" and len(close.cases) == 2
    longest = examples.public_examples(_item(data_dir, "HumanEval/12"))
    assert longest is not None and longest.cases[0] == ("longest([])", "None")  # doctest shows nothing for None
    assert examples.public_examples(_item(data_dir, "HumanEval/32")) is None  # its one example wraps the call


def test_a_right_program_passes_its_examples_in_the_sandbox_and_a_wrong_one_does_not(data_dir: Path) -> None:
    item = _item(data_dir, "HumanEval/0")
    found = examples.public_examples(item)
    assert found is not None
    right = item.meta["prompt"] + item.meta["canonical_solution"]
    assert examples.passes_examples(right, item, found)
    assert examples.passes_examples(item.meta["canonical_solution"], item, found)  # a body joins the prompt
    assert not examples.passes_examples(item.meta["prompt"] + "    return False\n", item, found)  # one of two


@given(st.lists(st.booleans(), min_size=1, max_size=6), st.data())
def test_the_rule_takes_the_first_passing_program_and_else_the_output(passes: list[bool], data: st.DataObject) -> None:
    order = [f"a{i}" for i in range(len(passes))]
    codes = {a: data.draw(st.sampled_from(["code", None])) for a in order}
    passing = dict(zip(order, passes, strict=True))
    got = examples.chosen(order, codes, passing)
    usable = [a for a in order if passing[a] and codes[a] is not None]
    assert got == (usable[0] if usable else order[0])


def test_one_voter_at_a_time_pays_for_the_voters_it_drew() -> None:
    tokens = {f"v{i}": {"prompt": 10, "completion": i} for i in range(1, 4)}
    assert examples.stop_at_first_pass(["v1", "v2", "v3"], {"v2": True, "v3": True}, "vote", tokens) == ("v2", 23)
    assert examples.stop_at_first_pass(["v1", "v2", "v3"], {}, "vote", tokens) == ("vote", 36)


def test_a_vote_team_s_stored_replies_are_replayed_with_both_rules(tmp_path: Path, data_dir: Path) -> None:
    """A 2-voter team whose vote took the wrong first program: the rule and the stop rule answer with the second."""
    item = _item(data_dir, "HumanEval/0")
    wrong = f"```python\n{item.meta['prompt']}    return False\n```"
    right = f"```python\n{item.meta['prompt']}{item.meta['canonical_solution']}```"
    agents = [{"name": n, "role": "programmer", "capacity": "large", "depends_on": []} for n in ("v1", "v2")]
    topology = {"agents": [*agents, {"name": "vote", "role": "majority_vote", "capacity": "large",
                                     "depends_on": ["v1", "v2"]}], "output": "vote"}
    trace = {"topology": topology, "events": [], "contents": {"v1": wrong, "v2": right, "vote": wrong}}
    tokens = {"v1": {"prompt": 100, "completion": 20}, "v2": {"prompt": 100, "completion": 30}}
    with ResultsStore(tmp_path / "r.sqlite") as store:
        store.ensure_run("sc", benchmark="humaneval", split="test", method="sc-cot", pool="cpu",
                               level="large", seeds=1, n_items=1, config={})
        store.put("sc", ItemRow(item_id=item.id, seed=0, prediction=None, gold=None, correct=False,
                                tokens=tokens, total_tokens=250, latency_s=0.0, trace_id=None,  # type: ignore[arg-type]
                                status="ok", trace_json=json.dumps(trace)))
        found = examples.study_run(store, store.run("sc"), {item.id: item}, examples.ExampleRunner(2))
    assert found == {(item.id, 0): {"output": False, "rule": True, "some_agent": True, "with_examples": True,
                                    "tokens": 250, "stop": True, "stop_tokens": 250}}
