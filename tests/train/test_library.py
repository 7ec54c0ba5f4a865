"""The library SFT teacher (one fixed team per task, drawn uniformly) and per-task worker seeds."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.train

from lemon.spec.render import render_spec  # noqa: E402
from lemon.spec.roles import RoleLibrary  # noqa: E402
from lemon.train.batch import group_worker_seed  # noqa: E402
from lemon.train.library import library_targets  # noqa: E402
from lemon.train.sft import SFTSettings, build_examples  # noqa: E402
from lemon.train.tasks import TrainTask  # noqa: E402
from lemon.train.verified import candidate_specs  # noqa: E402
from tests.pools import LEVELS  # noqa: E402


def _tasks(n: int, start: int = 0) -> list[TrainTask]:
    return [TrainTask(id=f"t/{i}", prompt=f"What is {i} + 1?", grade=lambda text: True) for i in range(start, n)]


def test_every_target_is_a_library_team_and_the_draw_covers_the_library() -> None:
    roles = RoleLibrary.load()
    library = dict(candidate_specs("number", roles, LEVELS))
    targets, counts = library_targets(_tasks(200), roles, LEVELS, seed=0)
    assert len(targets) == 200
    for _, label, spec in targets:
        assert library[label] == spec
    # uniform over 13 teams: each expected ~15 times in 200 draws; none missing, none dominating
    assert set(counts) == set(library)
    assert max(counts.values()) < 40


def test_the_draw_is_per_task_so_more_tasks_never_change_earlier_targets() -> None:
    roles = RoleLibrary.load()
    few, _ = library_targets(_tasks(30), roles, LEVELS, seed=3)
    many, _ = library_targets(_tasks(60), roles, LEVELS, seed=3)
    assert [(t.id, label) for t, label, _ in few] == [(t.id, label) for t, label, _ in many[:30]]
    other, _ = library_targets(_tasks(30), roles, LEVELS, seed=4)
    assert [label for _, label, _ in few] != [label for _, label, _ in other]


async def test_sft_with_the_library_teacher_makes_canonical_targets_without_a_model(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = SFTSettings(out_dir=tmp_path, teacher="library", teacher_pool="tiny")
    examples, counts = await build_examples(_tasks(20), settings)
    assert len(examples) == 20 and sum(counts.values()) == 20
    tiny_levels = ("small", "medium", "large")
    library = {label: render_spec(spec).text for label, spec in candidate_specs("number", RoleLibrary.load(),
                                                                                  tiny_levels)}
    assert all(e.target == library[e.source] for e in examples)


def test_task_worker_seeds_repeat_across_steps_and_step_seeds_do_not() -> None:
    by_task = {group_worker_seed(0, "t/1", step, "task") for step in range(1, 6)}
    by_step = {group_worker_seed(0, "t/1", step, "step") for step in range(1, 6)}
    assert len(by_task) == 1 and len(by_step) == 5
    assert group_worker_seed(0, "t/1", 1, "task") != group_worker_seed(0, "t/2", 1, "task")


async def test_an_unknown_teacher_is_one_line_naming_the_valid_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from lemon.errors import LemonError

    with pytest.raises(LemonError, match="unknown SFT teacher 'oracle'; valid: prompted, library"):
        await build_examples(_tasks(2), SFTSettings(out_dir=tmp_path, teacher="oracle"))


async def test_the_library_teacher_starts_no_worker_even_when_workers_are_to_be_served(  # type: ignore[no-untyped-def]
        tmp_path, monkeypatch) -> None:
    """A model-free teacher must not pay a llama-server's start (the rehearsal's and the GPU plan's SFT);
    a test double for `workers_for` records each start, and the prompted teacher still gets its workers."""
    import contextlib

    import lemon.train.sft as sft

    started: list[tuple[str, bool]] = []

    @contextlib.contextmanager
    def recording_workers_for(pool: str, serve: bool, out_dir):  # type: ignore[no-untyped-def]
        started.append((pool, serve))
        yield pool

    async def no_prompted_call(tasks, s, progress):  # type: ignore[no-untyped-def]
        return [], {"model": 0}

    monkeypatch.setattr(sft, "workers_for", recording_workers_for)
    monkeypatch.setitem(sft.TEACHERS, "prompted", no_prompted_call)
    settings = SFTSettings(out_dir=tmp_path, teacher="library", teacher_pool="tiny", serve_workers=True)
    examples, _ = await sft.teacher_data(_tasks(4), settings, None)
    assert len(examples) == 4 and started == []
    await sft.teacher_data(_tasks(4), SFTSettings(out_dir=tmp_path, teacher_pool="tiny", serve_workers=True), None)
    assert started == [("tiny", True)]
