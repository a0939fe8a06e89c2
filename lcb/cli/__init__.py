"""Command-line interface: `lcb <command>`. Importing this package registers every command."""

from lcb.cli import problems_cmd, run_cmd, score_cmd, splits_cmd  # noqa: F401  (registers)
from lcb.cli.app import app


def main() -> None:
    app()
