"""Command-line interface: `lcb <command>`.

Each command lives in its own module and registers itself on the typer application
(`lcb.cli.application.app`) when imported. `main()` imports only the module of the command being
run, so `lcb score` or `lcb problems` do not pay for LangChain or the optimizer modules; the
attribute `lcb.cli.app` is the application with every command registered.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

COMMAND_MODULES = {
    "problems": "problems_cmd",
    "run": "run_cmd",
    "demo": "run_cmd",
    "score": "score_cmd",
    "splits": "splits_cmd",
    "optimize": "optimize_cmd",
    "grid": "grid_cmd",
    "report": "report_cmd", "compare": "report_cmd",
}


def load_commands(*names: str) -> Any:
    """Register the commands `names` (every command when none) and return the typer app."""
    modules = {COMMAND_MODULES[name] for name in names} if names else set(COMMAND_MODULES.values())
    for module in sorted(modules):
        importlib.import_module(f"lcb.cli.{module}")
    from lcb.cli.application import app

    return app


def main() -> None:
    # Programs graded or run by this process may share its uid: keep them out of its memory,
    # environment (the API key) and descriptors (see lcb.sandbox.privilege).
    from lcb.sandbox.privilege import make_undumpable

    make_undumpable()
    command = sys.argv[1] if len(sys.argv) > 1 else None
    app = load_commands(command) if command in COMMAND_MODULES else load_commands()
    app()


def __getattr__(name: str) -> Any:
    if name == "app":
        return load_commands()
    raise AttributeError(f"module 'lcb.cli' has no attribute {name!r}")
