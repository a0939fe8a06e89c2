"""Command-line interface: `lcb <command>`. Importing this package registers every command."""

from lcb.cli import (  # noqa: F401  (importing a command module registers it)
    optimize_cmd,
    problems_cmd,
    run_cmd,
    score_cmd,
    splits_cmd,
)
from lcb.cli.app import app


def main() -> None:
    app()
