"""The `lemon` command: a thin typer layer; every LemonError becomes a one-line message and exit code 2."""

import sys

#: Seconds after a dropped Ctrl-C before it is sent again (the hook that saw it has long returned by then).
REDELIVER_S = 0.05


def entry() -> None:
    """The `lemon` command's entry point (pyproject's `[project.scripts]`): Ctrl-C at any point is one line on
    stderr and exit code 130. (Not named `main`: importing the `lemon.cli.main` module would rebind that name.)

    Why here and not in `lemon.cli.main`: the console script imports its entry's module before calling it, and
    that module imports typer, rich, pydantic and every command's module (about a second); a Ctrl-C then, before
    any handler of ours existed, printed a KeyboardInterrupt traceback. This module imports nothing before the
    `try` but `sys`, which Python has already loaded. A Ctrl-C that Python swallows is raised again
    (`_interrupt_again`). Once the command has ended, a Ctrl-C while the interpreter shuts down (joining worker
    threads) ends it at once, with the same line."""
    import signal  # built in: no import work for a Ctrl-C to land in

    received: list[int] = []

    def noted(signum: int, frame: object) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    try:
        sys.unraisablehook = _interrupt_again
        signal.signal(signal.SIGINT, noted)  # while the CLI's modules import: Python's own handler after
        from lemon.cli.main import main as run_cli

        signal.signal(signal.SIGINT, signal.default_int_handler)  # asyncio.run hands Ctrl-C over only from it
        run_cli()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except Exception:  # a Ctrl-C inside a C-level import that Python turned into another error
        if not received:
            raise
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    finally:
        import signal  # loaded by the CLI's modules already, or in a moment

        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where Ctrl-C was handed over ignored
            signal.signal(signal.SIGINT, _exit_interrupted)


def _interrupt_again(unraisable: "sys.UnraisableHookArgs") -> None:
    """A KeyboardInterrupt raised inside a weakref callback or a `__del__` (a Ctrl-C landing in an import's
    module-lock cleanup, say) is one Python cannot raise: it printed "Exception ignored in ...", dropped it and the
    command ran on, to its end. Sent again to the main thread a moment later (not at once: raised inside this hook
    it would be dropped too), it stops the command where it can. Any other such exception is reported as Python
    reports it."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        import signal
        import threading

        main = threading.main_thread().ident
        # a real signal to the main thread, which also cuts short the call it is blocked in (`interrupt_main` does not)
        threading.Timer(REDELIVER_S, signal.pthread_kill, (main, signal.SIGINT)).start()
        return
    sys.__unraisablehook__(unraisable)


def _exit_interrupted(signum: int, frame: object) -> None:
    """Ctrl-C after the command ended: the line and exit code 130 now, not a traceback from the shutdown."""
    import contextlib
    import os

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os.write(2, b"interrupted\n")
    os._exit(130)
