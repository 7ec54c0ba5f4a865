"""A trained policy's identity, and the card that replays its specs from the LLM cache without its weights.

A policy is a few hundred MB of weights that a lost machine takes with it (the six-benchmark table's trained
rows were). Its specs are small: the trained orchestrator sends each request through the LLM cache under the
policy's *content* identity (`policy_identity`: a hash of its weights, tokenizer and prompt style, never its
path), so an evaluation banks them beside the workers' replies, and `lemon cache export` carries both. The card
(`lemon cache card POLICY CARD.json`, a few hundred bytes, committable) names that identity and the prompt style;
`--orchestrator trained:CARD.json` then answers every spec from the cache alone (`CacheOnlyBackend`), so a
trained row rebuilds from the committed bank on a machine that never had the weights, or refuses in one line.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from lemon.errors import ConfigError
from lemon.files import read_regular
from lemon.orchestrator.policy_prompt import PROMPT_STYLES, read_prompt_style

CARD_FORMAT = "lemon-policy-card/1"
CARD_MAX_BYTES = 4096
_IDENTITY_PREFIX = "policy:"
# What decides a policy's output besides the request: its weights, its tokenizer and chat template, its config
# (named, so a card or a note written into the folder does not change who the policy is).
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")
_IDENTITY_NAMES = frozenset({"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                             "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt",
                             "tokenizer.model", "added_tokens.json"})


def is_card(path: str | os.PathLike[str]) -> bool:
    """Whether a trained orchestrator's path names a card rather than weights."""
    return os.fspath(path).endswith(".json")


def policy_identity(path: Path) -> str:
    """`policy:` + 16 hex digits of sha256 over the policy's files (name and bytes, sorted): the model id its
    requests are cached under. A .gguf is its one file; a directory, every weight, tokenizer and config file.

    An evaluation asks twice (its method's identity, its orchestrator's cache id): the hash is remembered per
    file list, size and modification time, so the weights (~540 MB) are read once a process."""
    files = [path] if path.is_file() else sorted(
        p for p in path.iterdir() if p.is_file() and (p.suffix in _WEIGHT_SUFFIXES or p.name in _IDENTITY_NAMES))
    stats = tuple((str(f), st.st_size, st.st_mtime_ns) for f in files for st in (f.stat(),))
    return _IDENTITY_PREFIX + _files_digest(stats, read_prompt_style(path))


@functools.lru_cache(maxsize=16)
def _files_digest(stats: tuple[tuple[str, int, int], ...], prompt_style: str) -> str:
    """16 hex digits of sha256 over each file's name and bytes, then the prompt style (a .gguf's style sits
    beside it, not inside). `stats` (path, size, mtime) is the memo's key: a rewritten file is hashed again."""
    h = hashlib.sha256()
    for name, _, _ in stats:
        f = Path(name)
        h.update(f.name.encode("utf-8") + b"\0")
        with f.open("rb") as fh:
            while block := fh.read(1 << 22):
                h.update(block)
        h.update(b"\0")
    h.update(prompt_style.encode("utf-8"))
    return h.hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class PolicyCard:
    """What replaying a policy's specs needs: the id its requests are cached under and the prompt it is asked
    with (the request's other parts, the task, roles, levels and decoding, come from the evaluation)."""

    model_id: str
    prompt_style: str

    def to_json(self) -> str:
        return json.dumps({"format": CARD_FORMAT, "model_id": self.model_id, "prompt": self.prompt_style},
                          indent=2) + "\n"


def card_of(path: Path) -> PolicyCard:
    """The card of the policy at `path` (a model directory or .gguf, already resolved)."""
    return PolicyCard(policy_identity(path), read_prompt_style(path))


def read_card(path: Path) -> PolicyCard:
    """A card from `path`, bounded and checked; anything else is one ConfigError naming the fix."""
    fix = f"write one with `lemon cache card POLICY {path}`"
    blob = read_regular(path, limit=CARD_MAX_BYTES, what="policy card", error=ConfigError,
                        size_hint="a card is a few hundred bytes: " + fix)
    try:
        raw = json.loads(blob.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError is one
        raise ConfigError(f"policy card {path}: {' '.join(str(exc).split())}; {fix}") from None
    if not isinstance(raw, dict) or raw.get("format") != CARD_FORMAT:
        raise ConfigError(f"policy card {path}: not a {CARD_FORMAT} object; {fix}")
    model_id, style = raw.get("model_id"), raw.get("prompt", "full")
    if not (isinstance(model_id, str) and model_id.startswith(_IDENTITY_PREFIX) and len(model_id) == 23
            and all(c in "0123456789abcdef" for c in model_id[len(_IDENTITY_PREFIX):])):
        raise ConfigError(f"policy card {path}: model_id must be 'policy:' and 16 hex digits; {fix}")
    if style not in PROMPT_STYLES:
        raise ConfigError(f"policy card {path}: unknown prompt style {style!r} (one of "
                          f"{', '.join(PROMPT_STYLES)}); {fix}")
    return PolicyCard(model_id, str(style))
