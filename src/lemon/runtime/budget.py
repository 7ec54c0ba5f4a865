"""Run budgets that CAP: tokens are reserved before a call, never counted after the fact.

A budget checked after each call is not a cap: one call overshoots it by its whole length, and parallel calls
already in flight all get billed while the run stops counting at the first one over. Here every model call
first reserves, on each `TokenLedger` it is charged to (its run's, and optionally a shared one such as a whole
evaluation's), an upper bound of what it can cost: a bound on its prompt tokens plus its `max_tokens`. When
less remains, `max_tokens` is clipped to what remains, so a backend that honours `max_tokens` can never take
a ledger over its cap. After the call the reservation is settled with the tokens the backend reports.

The prompt bound: a token covers at least one byte in byte-level BPE and SentencePiece-with-byte-fallback
tokenizers, so the UTF-8 length of the messages plus the chat template's few special tokens per message bounds
the prompt tokens without a tokenizer (remote endpoints expose none). It overestimates (about 4 bytes make a
token in English), which costs only at the very end of a budget: reservations are settled with real counts.

Fairness rule: a call takes its full want when it is free; it waits while other calls hold reservations that
may come back; only when nobody else holds any is it clipped (or, with less than one completion token left,
refused: `BudgetExhausted`). So clipping happens only when the budget is truly running out, not because
siblings happened to reserve first.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass

from lemon.errors import LemonError
from lemon.llm.base import Message

# Special tokens a chat template adds per message (role header, end of turn: 5 in ChatML and Llama 3) and per
# prompt (BOS, generation prompt, a default date line in some templates), with margin.
TEMPLATE_TOKENS_PER_MESSAGE = 8
TEMPLATE_TOKENS_PER_PROMPT = 64


def prompt_token_bound(messages: Sequence[Message]) -> int:
    """An upper bound on the prompt tokens of `messages` for any byte-level tokenizer, without tokenizing."""
    return TEMPLATE_TOKENS_PER_PROMPT + sum(len(m.content.encode("utf-8")) + TEMPLATE_TOKENS_PER_MESSAGE
                                            for m in messages)


@dataclass(frozen=True, slots=True)
class Budget:
    """`max_tokens` caps the tokens (prompt + completion) of all agents of one run; None = no cap.

    Tokens of agents served from the node cache count too: a spec's budget behaviour must not depend on
    what happened to be cached.
    """

    max_tokens: int | None = None
    call_timeout_s: float | None = None

    def __post_init__(self) -> None:
        n = self.max_tokens
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise LemonError(f"a token budget must be a positive integer, got {n!r}; fix --budget-tokens")
        t = self.call_timeout_s
        if t is not None and not (isinstance(t, int | float) and math.isfinite(t) and t > 0):
            raise LemonError(f"a call timeout must be a positive number of seconds, got {t!r}; fix --timeout")


class BudgetExhausted(LemonError):
    """A ledger cannot grant a call even its minimum (nothing else holds tokens that could come back)."""

    def __init__(self, message: str, scope: str = "run") -> None:
        super().__init__(message)
        self.scope = scope


class TokenLedger:
    """Tokens used and reserved against one cap (None: no cap, still counted), shared by concurrent calls.

    `scope` names what the cap covers ("run", "eval") in messages and in `BudgetExhausted.scope`. Single event
    loop only (no locks needed: nothing awaits between a check and the reservation it justifies).
    """

    def __init__(self, cap: int | None, scope: str, *, used: int = 0) -> None:
        self.cap = cap
        self.scope = scope
        self.used = used
        self.reserved = 0
        self.refused = False  # set once a reservation was refused: the cap is reached
        self._settled = asyncio.Event()

    @property
    def free(self) -> int | None:
        return None if self.cap is None else self.cap - self.used - self.reserved

    async def reserve(self, low: int, high: int, *, what: str = "a call") -> int:
        """Hold `high` tokens, or (when nobody else holds any) as many as are free if at least `low`.

        Returns what is held; the caller must `settle` it exactly once. Raises `BudgetExhausted`.
        """
        while True:
            free = self.free
            if free is None or free >= high:
                got = high
            elif self.reserved == 0 and free >= low:
                got = free
            elif self.reserved == 0:
                self.refused = True
                raise BudgetExhausted(self._refusal(low, what), self.scope)
            else:
                event = self._settled
                await event.wait()  # someone settles: tokens may have come back
                continue
            self.reserved += got
            return got

    def _refusal(self, low: int, what: str) -> str:
        """Why a call of at least `low` tokens is refused: the cap is used up, or it never could hold the call
        (a budget below one call's need read as "used up" with nothing used)."""
        if self.cap is not None and low > self.cap:
            return (f"{self.scope} token budget of {self.cap} is below what one call needs: {what} needs {low} "
                    f"tokens at least (its prompt and one reply token); raise the budget")
        return (f"{self.scope} token budget of {self.cap} used up before {what} ({self.used} used, {low} needed "
                "at least)")

    def settle(self, held: int, spent: int) -> None:
        """Give back reservation `held` and charge `spent` (synchronous: safe in `finally` on cancellation)."""
        self.reserved -= held
        self.used += spent
        event, self._settled = self._settled, asyncio.Event()
        event.set()


async def reserve_all(ledgers: Sequence[TokenLedger], low: int, high: int, *, what: str,
                      clip: Sequence[bool] | None = None) -> int:
    """Reserve the same amount on every ledger (the smallest grant); on refusal nothing stays held.

    `clip[i]` False means ledger i grants all of what the earlier ones granted or refuses (a shared ledger whose
    cap must decide how many calls run, never how long one answer may be).
    """
    held: list[tuple[TokenLedger, int]] = []
    got = high
    try:
        for i, ledger in enumerate(ledgers):
            may_clip = clip is None or clip[i]
            amount = await ledger.reserve(low if may_clip else got, got, what=what)
            held.append((ledger, amount))
            got = min(got, amount)
    except BaseException:
        for ledger, amount in held:
            ledger.settle(amount, 0)
        raise
    for ledger, amount in held:
        if amount > got:
            ledger.settle(amount - got, 0)
    return got


def settle_all(ledgers: Sequence[TokenLedger], held: int, spent: int) -> None:
    for ledger in ledgers:
        ledger.settle(held, spent)


def check_positive_int(flag: str, value: int | None) -> None:
    """A usage error naming `flag` unless `value` is None or a positive integer (0 or -1 is not "unlimited")."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise LemonError(f"{flag} must be a positive integer, got {value!r}")


def check_timeout(flag: str, value: float | None) -> None:
    """A usage error naming `flag` unless `value` is None or a positive finite number of seconds."""
    if value is not None and not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise LemonError(f"{flag} must be a positive number of seconds, got {value!r}")
