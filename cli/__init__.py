"""The `graphengine` command line: `main` in cli/commands.py, one module per command group.

It sits above both sides: `serve` starts the server, `run` is a client of one, `compile` and
`inspect` use the compiler alone. `python -m graphengine.cli` runs it too (cli/__main__.py).
"""

from graphengine.cli.commands import main

__all__ = ["main"]
