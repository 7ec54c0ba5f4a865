"""Every command that writes a file a user names, as a person runs it: for the tests of odd targets (devices,
symlinks, FIFOs, folders) and of a full disk, which must hold for each of them alike (issue 52, items 2 and 7).

`written_store` is one real results store (the real `evaluate`, scripted pools) shared by a test module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.view.conftest import Stored, build_store


@dataclass(frozen=True)
class Writer:
    """A command that writes one file: `args(target)` is its command line, `suffix` a name it accepts."""

    args: Callable[[Stored, Path], tuple[str, ...]]
    suffix: str


def _store(s: Stored) -> tuple[str, ...]:
    return ("--store", str(s.store))


def _policy(s: Stored) -> str:
    """A stand-in trained policy beside the store: its files' bytes are all `lemon cache card` reads."""
    folder = s.store.parent / "policy"
    if not folder.is_dir():
        folder.mkdir()
        (folder / "config.json").write_text('{"model_type": "llama"}')
        (folder / "model.safetensors").write_bytes(b"stand-in weights")
    return str(folder)


WRITERS: dict[str, Writer] = {
    "cache export": Writer(lambda s, f: ("cache", "export", str(f)), ".jsonl.gz"),
    "cache card": Writer(lambda s, f: ("cache", "card", _policy(s), str(f)), ".json"),
    "report --file": Writer(lambda s, f: ("report", *_store(s), "--file", str(f)), ".md"),
    "report --plot": Writer(lambda s, f: ("report", *_store(s), "--plot", str(f)), ".png"),
    "export csv": Writer(lambda s, f: ("export", "csv", *_store(s), "--file", str(f)), ".csv"),
    "export otel": Writer(lambda s, f: ("export", "otel", s.good[:8], *_store(s), "--file", str(f)), ".jsonl"),
    "export inspect": Writer(lambda s, f: ("export", "inspect", s.good[:8], *_store(s), "--file", str(f)), ".eval"),
    "view": Writer(lambda s, f: ("view", *_store(s), "--file", str(f)), ".html"),
    "trace": Writer(lambda s, f: ("trace", s.good[:8], s.items[0], *_store(s), "--file", str(f)), ".json"),
}


@pytest.fixture(scope="module")
def written_store(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[Stored]:
    """A store with two runs, built once per module (its own LEMON_HOME while it is built)."""
    folder = tmp_path_factory.mktemp("written-store")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LEMON_HOME", str(folder / "home"))
        yield build_store(folder / "results.sqlite", data_dir)
