"""Write lcb's bundled sample set: `lcb/data/sample/test.jsonl`.

The rows follow `livecodebench/code_generation_lite` exactly: the same fields in the same
order, `public_test_cases` as JSON text, `private_test_cases` in the official encoding
(base64 of zlib of a pickled JSON string) and `metadata` as JSON text. The problems themselves
are defined, one module each, in `tools/sample_problems/`; the output depends only on them
(every random test is drawn from a fixed seed), so rebuilding gives the same rows.

Reference solutions are hand-written files in `lcb/data/sample/solutions/<id>.py`; this
script only checks that each problem has one, and never copies them into a row.

Usage (from the repository root):
    .venv/bin/python tools/build_samples.py [--out DIR]     # default: lcb/data/sample
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sample_problems import SampleProblem, all_problems

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lcb.data.problems import encode_private_tests  # noqa: E402

DEFAULT_OUT = ROOT / "lcb" / "data" / "sample"
ROWS_FILE = "test.jsonl"


def to_row(problem: SampleProblem) -> dict:
    """One `code_generation_lite` row, fields in the dataset's order."""

    def cases(group: tuple) -> list[dict]:
        return [{"input": c.input, "output": c.output, "testtype": problem.testtype}
                for c in group]

    metadata = {"func_name": problem.func_name} if problem.func_name else {}
    return {
        "question_title": problem.title,
        "question_content": problem.statement,
        "platform": problem.platform,
        "question_id": problem.id,
        "contest_id": problem.contest_id,
        "contest_date": problem.contest_date,
        "starter_code": problem.starter_code,
        "difficulty": problem.difficulty,
        "public_test_cases": json.dumps(cases(problem.public)),
        "private_test_cases": encode_private_tests(cases(problem.private)),
        "metadata": json.dumps(metadata),
    }


def write_rows(out_dir: Path) -> Path:
    """Write the rows file into `out_dir` (created if needed) and return its path."""
    problems = all_problems()
    ids = [problem.id for problem in problems]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"duplicate sample ids: {sorted(i for i in ids if ids.count(i) > 1)}")
    missing = [i for i in ids if not (DEFAULT_OUT / "solutions" / f"{i}.py").is_file()]
    if missing:
        raise SystemExit(f"no reference solution in {DEFAULT_OUT / 'solutions'} for: {missing}")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ROWS_FILE
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        for problem in problems:
            handle.write(json.dumps(to_row(problem)) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"directory to write {ROWS_FILE} into (default: lcb/data/sample)")
    path = write_rows(parser.parse_args(argv).out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
