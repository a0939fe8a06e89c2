"""The `lcb` typer application; each command lives in its own module of this package."""

import typer

app = typer.Typer(
    name="lcb",
    help=(
        "Run single- and multi-agent LLM teams on LiveCodeBench problems, grade programs the way "
        "LiveCodeBench grades them, and optimize the teams' prompts.\n\n"
        "The model endpoint is read from VLLM_BASE_URL, MODEL_ID and OPENAI_API_KEY."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Keep `lcb` a command group even while only one command is registered."""
