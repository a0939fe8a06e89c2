"""Prompts: LiveCodeBench's question template, the role prompt files and the output contract.

Contract:
- `question_prompt(problem)` equals LiveCodeBench's generic code-generation prompt
  (`get_generic_question_template_answer`) character for character: the statement, then the
  format lines of the problem's mode (the starter code for functional problems, the
  `# YOUR CODE HERE` stub for stdin problems), then the answer line. Public tests are never
  added (LiveCodeBench shows only what the statement itself contains). The mode decides the
  format, so it always agrees with how the program is graded.
- Role prompts are data: `configs/prompts/<topology>/lcb/<role>.txt`, written by us and
  editable by optimizers. `load_role_prompt` reads one; `seed_bundle` reads a set as
  `{role: text}`. A missing or empty file raises `PromptError` naming the path.
- The output contract (end with exactly one fenced python block holding the whole solution) is
  added by code with `with_contract`, after the editable text, so an optimizer neither sees nor
  deletes it. Teams give it to the answering agent(s) only.
- Placeholders: a role file may hold `{name}` for a name in `PLACEHOLDERS` (today only
  `{workers}`, in the centralized manager). `fill_placeholders` substitutes those and leaves
  every other brace alone, since prompts may quote code with braces.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from lcb.data.problems import Mode, Problem
from lcb.registry import SEED_ROLES  # each topology's roles, in the order bundles list them

PROMPTS_ROOT = Path(__file__).resolve().parents[2] / "configs" / "prompts"
TASK_DIR = "lcb"  # configs/prompts/<topology>/<TASK_DIR>/<role>.txt

# LiveCodeBench's format lines (facts carried over; see the official prompts/code_generation.py).
STARTER_FORMAT = (
    "You will use the following starter code to write the solution to the problem and enclose "
    "your code within delimiters."
)
STDIN_FORMAT = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not "
    "directly test on the sample inputs). Enclose your code within delimiters as follows. "
    "Ensure that when the python program runs, it reads the inputs, runs the algorithm and "
    "writes output to STDOUT."
)
STDIN_STUB = "# YOUR CODE HERE"
ANSWER_LINE = "### Answer: (use the provided format with backticks)"

PLACEHOLDERS: dict[str, str] = {
    "workers": "centralized manager: the workers it may delegate to, one '- role: duty' a line",
}

OUTPUT_CONTRACT = (
    "Output contract (set by the harness): end your reply with exactly one fenced code block "
    "labelled python (```python ... ```) that holds the complete solution you submit. Put no "
    "other code block after it: that last block is the program run against the hidden tests."
)
_MODE_CONTRACT = {
    Mode.STDIN: "The program must read the input from standard input and print the answer to "
    "standard output.",
    Mode.FUNCTIONAL: "Keep the class and method signature of the starter code{method}; the tests "
    "call the method directly, so do not read input or print the answer.",
}
_NAME = re.compile(r"[a-z][a-z0-9_]*")


class PromptError(ValueError):
    """A prompt file or bundle that cannot be used; the message names the path or the key."""


def question_prompt(problem: Problem) -> str:
    """The user prompt for `problem`, in LiveCodeBench's generic template.

    >>> from lcb.data.problems import Mode, Problem
    >>> p = Problem("1", "t", "Add.", "", Mode.STDIN, None, (), (), "easy", "atcoder", "c", "d")
    >>> question_prompt(p).splitlines()[:2]
    ['### Question:', 'Add.']
    """
    prompt = f"### Question:\n{problem.statement}\n\n"
    if problem.mode is Mode.FUNCTIONAL:
        prompt += f"### Format: {STARTER_FORMAT}\n```python\n{problem.starter_code}\n```\n\n"
    else:
        prompt += f"### Format: {STDIN_FORMAT}\n```python\n{STDIN_STUB}\n```\n\n"
    return prompt + f"{ANSWER_LINE}\n\n"


def output_contract(mode: Mode | str | None = None, *, fn_name: str | None = None) -> str:
    """`OUTPUT_CONTRACT`, plus the mode's sentence when `mode` is given."""
    if mode is None:
        return OUTPUT_CONTRACT
    try:
        mode = Mode(mode)
    except ValueError:
        raise PromptError(
            f"unknown mode {mode!r}; expected one of {[m.value for m in Mode]}"
        ) from None
    method = f" (`{fn_name}`)" if fn_name else ""
    return f"{OUTPUT_CONTRACT}\n{_MODE_CONTRACT[mode].format(method=method)}"


def with_contract(
    role_prompt: str, *, mode: Mode | str | None = None, fn_name: str | None = None
) -> str:
    """`role_prompt` followed by the output contract (see `output_contract`)."""
    if not isinstance(role_prompt, str):
        raise TypeError(f"role_prompt must be str, got {type(role_prompt).__name__}")
    return f"{role_prompt.rstrip()}\n\n{output_contract(mode, fn_name=fn_name)}"


def role_path(topology: str, role: str, *, root: Path | None = None) -> Path:
    """Where the prompt of `role` in `topology` lives (the file may not exist)."""
    return _topology_dir(topology, root) / f"{_checked_name('role', role)}.txt"


def load_role_prompt(topology: str, role: str, *, root: Path | None = None) -> str:
    """The text of `configs/prompts/<topology>/lcb/<role>.txt`, surrounding whitespace stripped.

    Raises `PromptError` naming the path when the file is missing or empty.
    """
    path = role_path(topology, role, root=root)
    if not path.is_file():
        known = ", ".join(available_roles(topology, root=root)) or "none"
        raise PromptError(f"no prompt for role {role!r} of {topology!r}: {path} does not exist "
                          f"(roles there: {known})")
    text = path.read_text(encoding="utf-8").strip()
    if not text:
        raise PromptError(f"prompt file {path} is empty")
    return text


def available_roles(topology: str, *, root: Path | None = None) -> list[str]:
    """Roles with a prompt file for `topology`: seed roles in `SEED_ROLES` order, then others."""
    folder = _topology_dir(topology, root)
    found = {path.stem for path in folder.glob("*.txt")} if folder.is_dir() else set()
    seed = [role for role in SEED_ROLES.get(topology, ()) if role in found]
    return seed + sorted(found - set(seed))


def seed_bundle(
    topology: str, roles: Sequence[str] | None = None, *, root: Path | None = None
) -> dict[str, str]:
    """`{role: prompt text}` for `roles` (default: every role file of `topology`).

    >>> list(seed_bundle("single"))
    ['solver']
    """
    if roles is None:
        roles = available_roles(topology, root=root)
        if not roles:
            raise PromptError(f"no role prompts for topology {topology!r} in "
                              f"{_topology_dir(topology, root)}")
    elif isinstance(roles, str):
        raise TypeError("roles must be a sequence of role names, not a single str")
    return {role: load_role_prompt(topology, role, root=root) for role in roles}


def placeholders_in(text: str) -> set[str]:
    """The known placeholders (`PLACEHOLDERS`) that occur in `text` as `{name}`."""
    return {name for name in PLACEHOLDERS if f"{{{name}}}" in text}


def fill_placeholders(text: str, /, **values: str) -> str:
    """Replace `{name}` by `values[name]` for known placeholders; other braces stay as they are.

    Raises `PromptError` for a name not in `PLACEHOLDERS` and for a placeholder of `text` that
    no value fills. A value whose placeholder is absent (an optimizer removed it) is ignored.

    >>> fill_placeholders("Workers:\\n{workers}\\nUse {x}.", workers="- coder: writes code")
    'Workers:\\n- coder: writes code\\nUse {x}.'
    """
    unknown = sorted(set(values) - set(PLACEHOLDERS))
    if unknown:
        raise PromptError(f"unknown placeholder(s) {unknown}; known: {sorted(PLACEHOLDERS)}")
    unfilled = sorted(placeholders_in(text) - set(values))
    if unfilled:
        raise PromptError(f"placeholder(s) {unfilled} in the prompt have no value")
    if not values:
        return text
    pattern = re.compile("|".join(re.escape(f"{{{name}}}") for name in values))
    return pattern.sub(lambda match: values[match.group()[1:-1]], text)


def _topology_dir(topology: str, root: Path | None) -> Path:
    return Path(root or PROMPTS_ROOT) / _checked_name("topology", topology) / TASK_DIR


def _checked_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise PromptError(f"invalid {kind} name {name!r}: use lower-case letters, digits and _")
    return name


def prompt_hash(text: str) -> str:
    """sha256 (hex) of one role prompt's text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()  # any text


def bundle_hashes(bundle: Mapping[str, str]) -> dict[str, str]:
    """`{role: prompt_hash(text)}` of a bundle: job.json's `seed_prompts`."""
    return {role: prompt_hash(text) for role, text in bundle.items()}
