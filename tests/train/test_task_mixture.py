"""A training mixture of benchmarks: interleaved, each from its own train split, recorded per benchmark."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.benchmarks.registry import load_split
from lemon.errors import LemonError
from lemon.train.tasks import load_train_tasks, split_record

MIX = "gsm8k,svamp,multiarith"


def test_a_mixture_interleaves_the_train_splits_and_never_touches_a_test_item(data_dir: Path) -> None:
    split, tasks = load_train_tasks(MIX, limit=4, data_dir=data_dir)
    assert split == "train+train+train" and len(tasks) == 12
    assert [t.id.split("/")[0] for t in tasks[:6]] == ["gsm8k", "svamp", "multiarith"] * 2
    for bench in MIX.split(","):
        test_ids = {str(i.id) for i in load_split(bench, "test", data_dir)}
        assert not test_ids & {t.id for t in tasks if t.id.startswith(bench)}
        assert [t.id for t in tasks if t.id.startswith(f"{bench}/")] == \
            [t.id for t in load_train_tasks(bench, limit=4, data_dir=data_dir)[1]]
    record = split_record(MIX, split, tasks)
    assert [(m["benchmark"], len(m["item_ids"])) for m in record["mixture"]] == [(b, 4) for b in MIX.split(",")]


@pytest.mark.parametrize(("benchmarks", "split", "message"), [
    ("gsm8k,gsm8k", None, "name each benchmark once"),
    ("gsm8k,", None, "name each benchmark once"),
    ("gsm8k,svamp", "test", "do not name a split"),
    ("gsm8k,nope", None, "unknown benchmark 'nope'"),
])
def test_a_bad_mixture_is_one_line(data_dir: Path, benchmarks: str, split: str | None, message: str) -> None:
    with pytest.raises(LemonError, match=message):
        load_train_tasks(benchmarks, split=split, data_dir=data_dir)


def test_sft_holds_out_items_after_each_benchmarks_training_items(data_dir: Path, tmp_path: Path) -> None:
    """`lemon sft --limit N` on a mixture counts per benchmark, as `lemon train --limit N` does: its held-out
    items (the valid-spec rate) are never items that GRPO then trains on."""
    from lemon.train.sft import SFTSettings, sft_tasks

    s = SFTSettings(out_dir=tmp_path, benchmark="gsm8k,svamp,multiarith", n_train=2, n_eval=1,
                    data_dir=str(data_dir))
    _, train, held_out = sft_tasks(s)
    _, grpo = load_train_tasks("gsm8k,svamp,multiarith", limit=2, data_dir=data_dir)
    assert [t.id for t in train] == [t.id for t in grpo] and len(held_out) == 3
    assert not {t.id for t in held_out} & {t.id for t in grpo}
    assert {t.id.split("/")[0] for t in held_out} == {"gsm8k", "svamp", "multiarith"}
