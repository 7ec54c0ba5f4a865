"""SIGTERM stops a command once: the handler ignores further TERMs while the command shuts down."""

from __future__ import annotations

import signal

import pytest

from lemon.cli.options import stop_on_sigterm


def test_a_second_sigterm_during_shutdown_is_ignored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    try:
        stop_on_sigterm()
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        with pytest.raises(KeyboardInterrupt):
            handler(signal.SIGTERM, None)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # the shutdown cannot be interrupted again
    finally:
        signal.signal(signal.SIGTERM, before)
