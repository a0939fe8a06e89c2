"""The extraction rule on tricky completions (lcb.extract)."""

from __future__ import annotations

import pytest

from lcb.extract import BlockKind, extract_code, fenced_blocks, is_program, strip_think

FENCE = "```"
PROGRAM = "n = int(input())\nprint(n * 2)"

NESTED_STRING = '''Here is the program.
```python
TEMPLATE = """
```python
print("inner")
```
"""
print(TEMPLATE.strip())
```
It prints a markdown snippet.'''

# (id, completion, expected code or None)
CASES = [
    ("plain", f"```python\n{PROGRAM}\n```", PROGRAM),
    ("prose_around", f"Idea: double it.\n\n```python\n{PROGRAM}\n```\n\nThis runs in O(1).",
     PROGRAM),
    ("last_labelled_wins", "```python\nprint(1)\n```\nBetter:\n```python\nprint(2)\n```",
     "print(2)"),
    ("labelled_beats_later_bare", "```py\nprint('ok')\n```\nRun it:\n```\nprint('bare')\n```",
     "print('ok')"),
    ("bare_only", "Answer:\n```\nimport sys\nprint(sys.stdin.read())\n```",
     "import sys\nprint(sys.stdin.read())"),
    ("labels_any_case", "```Python3\nprint(3)\n```\ntext\n```PY\nprint(4)\n```", "print(4)"),
    ("info_string_extras", "```python title=sol.py\nprint(5)\n```", "print(5)"),
    ("last_block_syntax_error", "```python\nprint(1)\n```\nFix:\n```python\ndef f(:\n```",
     "print(1)"),
    ("json_block_last", f"```python\n{PROGRAM}\n```\n```json\n{{\"a\": 1}}\n```", PROGRAM),
    ("bare_dict_skipped", f"```python\n{PROGRAM}\n```\n```\n{{'a': 1}}\n```", PROGRAM),
    ("bare_list_skipped", "```\nprint(7)\n```\n```\n[1, 2, 3]\n```", "print(7)"),
    ("python_block_starting_with_bracket", "```python\n[print(i) for i in range(3)]\n```", None),
    ("other_language_ignored", "```text\nx = 1\nprint(x)\n```\n```bash\necho hi\n```", None),
    ("cpp_then_python", "```cpp\nint main(){}\n```\n```python\nprint(8)\n```", "print(8)"),
    ("sample_output_bare_after_program",
     "```\nprint('YES')\n```\nExpected output:\n```\nYES\n```\n```\n42\n```", "print('YES')"),
    ("nested_fence_in_string", NESTED_STRING,
     'TEMPLATE = """\n```python\nprint("inner")\n```\n"""\nprint(TEMPLATE.strip())'),
    ("nested_bare_fences_in_string",
     'Done:\n```python\ndoc = """\n```\nx\n```\n"""\nprint(doc)\n```\nBye.',
     'doc = """\n```\nx\n```\n"""\nprint(doc)'),
    ("longer_outer_fence", "````python\ns = '''\n```\n'''\nprint(s)\n````",
     "s = '''\n```\n'''\nprint(s)"),
    ("tilde_fence", "~~~python\nprint(9)\n~~~", "print(9)"),
    ("think_code_ignored",
     "<think>\n```python\nprint('draft')\n```\n</think>\nFinal:\n```python\nprint('final')\n```",
     "print('final')"),
    ("think_only_code", "<think>\n```python\nprint('draft')\n```\n</think>\nI could not solve it.",
     None),
    ("unclosed_leading_think",
     "reasoning...\n```python\nprint('draft')\n```\n</think>\n```python\nprint('answer')\n```",
     "print('answer')"),
    ("unclosed_leading_think_no_answer", "```python\nprint('draft')\n```\n</think>\nNo idea.",
     None),
    ("cut_off_in_think", "```python\nprint('kept')\n```\n<think>\n```python\nprint('later')\n",
     "print('kept')"),
    ("no_code", "I think the answer is 42, but I am not sure how to code it.", None),
    ("stdin_template_only", "```python\n# YOUR CODE HERE\n```", None),
    ("template_after_program", "```python\nprint(1)\n```\n```python\n# YOUR CODE HERE\n```",
     "print(1)"),
    ("empty_and_comment_blocks", "```python\n```\n```python\n# just a note\n\n```", None),
    ("pass_only", "```python\npass\n```", None),
    ("starter_without_body",
     "```python\nclass Solution:\n    def f(self, nums: List[int]) -> int:\n        \n```", None),
    ("functional_solution",
     "```python\nclass Solution:\n    def f(self, nums):\n        return sum(nums)\n```",
     "class Solution:\n    def f(self, nums):\n        return sum(nums)"),
    ("crlf", f"Code:\r\n```python\r\n{PROGRAM.replace(chr(10), chr(13) + chr(10))}\r\n```\r\n",
     PROGRAM),
    ("indented_fence_in_list",
     "1. Solution:\n\n   ```python\n   def g():\n       return 1\n   print(g())\n   ```\n",
     "def g():\n    return 1\nprint(g())"),
    ("unterminated_alone", f"```python\n{PROGRAM}\n", PROGRAM),
    ("unterminated_after_complete",
     "```python\nprint('done')\n```\nA faster one:\n```python\nimport sys\nprint(len(",
     "print('done')"),
    ("unterminated_parseable_after_complete",
     "```python\nprint('done')\n```\nShorter:\n```python\nimport sys\ndata = sys.stdin.read()\n",
     "print('done')"),
    ("unterminated_cut_mid_expression", "```python\nprint(len(", None),
    ("glued_closing_fence", "```python\nprint(10)```", "print(10)"),
    ("inline_backticks_in_prose", "Use ```python``` fences.\n```python\nprint(11)\n```",
     "print(11)"),
    ("null_byte", "```python\nprint(1)\x00\n```", None),
    ("leading_blank_lines_trimmed", "```python\n\n\nprint(12)   \n\n```", "print(12)"),
]


@pytest.mark.parametrize(("completion", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_extract_code(completion: str, expected: str | None) -> None:
    assert extract_code(completion) == expected


def test_case_ids_are_unique() -> None:
    assert len({case[0] for case in CASES}) == len(CASES) >= 20


def test_extracted_code_parses_and_has_unix_newlines() -> None:
    for name, completion, expected in CASES:
        code = extract_code(completion)
        if expected is not None:
            assert code is not None and "\r" not in code, name
            compile(code, name, "exec")


def test_fenced_blocks_report_labels_kinds_and_closure() -> None:
    blocks = fenced_blocks("```json\n{}\n```\n```\nx = 1\n```\n```Py3\nprint(1)\n")
    assert [(b.label, b.kind, b.closed) for b in blocks] == [
        ("json", BlockKind.OTHER, True),
        ("", BlockKind.BARE, True),
        ("py3", BlockKind.PYTHON, False),
    ]


def test_json_block_does_not_swallow_later_blocks() -> None:
    text = "```json\n[1]\n```\n```python\nprint(1)\n```"
    assert [b.code for b in fenced_blocks(text)] == ["[1]", "print(1)"]


def test_broken_first_block_closes_at_its_own_fence() -> None:
    text = "```python\ndef f(:\n```\nprose\n```python\nprint(2)\n```"
    assert [b.code for b in fenced_blocks(text)] == ["def f(:", "print(2)"]


@pytest.mark.parametrize(
    ("code", "expected"),
    [("print(1)", True), ("x = 1", True), ("import os", True), ("YES", False), ("-1", False),
     ('"""doc"""\n...', False), ("", False), ("# c", False), ("{1: 2}", False), ("def f(", False)],
)
def test_is_program(code: str, expected: bool) -> None:
    assert is_program(code) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>plan</think>\nanswer", "answer"),
        ("<THINK>a</THINK>b<think>c</think>d", "bd"),
        ("hidden reasoning</think>visible", "visible"),
        ("visible<think>cut off while thinking", "visible"),
        ("<think>a<think>b</think>c</think>d", "d"),
        ("  no reasoning at all  ", "no reasoning at all"),
        ("", ""),
    ],
)
def test_strip_think(text: str, expected: str) -> None:
    assert strip_think(text) == expected


@pytest.mark.parametrize("bad", [None, b"```python\nprint(1)\n```", 3])
def test_non_text_input_is_a_clear_error(bad: object) -> None:
    with pytest.raises(TypeError, match="expected the completion as str"):
        extract_code(bad)  # type: ignore[arg-type]


def test_many_fences_stay_correct() -> None:
    chunks = [f"Step {i}:\n```python\nprint({i})\n```\n```\n{i}\n```" for i in range(300)]
    assert extract_code("\n".join(chunks)) == "print(299)"
