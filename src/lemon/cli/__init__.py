"""The `lemon` command: a thin typer layer; every LemonError becomes a one-line message and exit code 2."""
