"""Fixture rows in the official code_generation_lite format, and files/caches holding them.

The problems are our own toy tasks; private tests are encoded the official way
(base64(zlib(pickle(JSON text)))) with `lcb.data.problems.encode_private_tests`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lcb.data.hub import HUB_DATASET

FAKE_SHA = "0123456789abcdef0123456789abcdef01234567"


def _encode(cases: list[dict]) -> str:
    from lcb.data.problems import encode_private_tests

    return encode_private_tests(cases)


def stdin_row(qid: str, *, difficulty: str = "easy", platform: str = "atcoder",
              date: str = "2023-08-21T00:00:00", n_private: int = 2) -> dict:
    """A stdin problem: print the sum of two integers."""
    private = [{"input": f"{i} {i + 1}\n", "output": f"{2 * i + 1}\n", "testtype": "stdin"}
               for i in range(n_private)]
    return {
        "question_title": f"Sum {qid}",
        "question_content": "Read two integers A and B and print A+B.",
        "platform": platform,
        "question_id": qid,
        "contest_id": f"c{qid}",
        "contest_date": date,
        "starter_code": "",
        "difficulty": difficulty,
        "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n",
                                          "testtype": "stdin"}]),
        "private_test_cases": _encode(private),
        "metadata": "{}",
    }


def functional_row(qid: str, *, difficulty: str = "medium", platform: str = "leetcode",
                   date: str = "2023-09-02T00:00:00", fn_name: str = "addTwo") -> dict:
    """A functional problem with a two-argument method."""
    row = stdin_row(qid, difficulty=difficulty, platform=platform, date=date)
    row["starter_code"] = f"class Solution:\n    def {fn_name}(self, a: int, b: int) -> int:\n"
    row["metadata"] = json.dumps({"func_name": fn_name})
    row["public_test_cases"] = json.dumps([{"input": "1\n2", "output": "3",
                                            "testtype": "functional"}])
    row["private_test_cases"] = _encode([{"input": "4\n5", "output": "9",
                                          "testtype": "functional"}])
    return row


def mixed_rows() -> list[dict]:
    """Six rows covering every difficulty, platform and both modes, dated 2023-05 .. 2023-10."""
    return [
        stdin_row("p1", difficulty="easy", platform="atcoder", date="2023-05-01T00:00:00"),
        functional_row("p2", difficulty="medium", platform="leetcode", date="2023-06-15T00:00:00"),
        stdin_row("p3", difficulty="hard", platform="codeforces", date="2023-07-01T00:00:00"),
        stdin_row("p4", difficulty="Easy", platform="AtCoder", date="2023-08-20T00:00:00"),
        functional_row("p5", difficulty="hard", platform="leetcode", date="2023-09-30T00:00:00"),
        stdin_row("p6", difficulty="medium", platform="codeforces", date="2023-10-01T00:00:00"),
    ]


def write_jsonl(path: Path, rows: list[dict], *, extra_lines: dict[int, str] | None = None
                ) -> Path:
    """Write rows one per line; `extra_lines` inserts raw text before the given row index."""
    lines = []
    for index, row in enumerate(rows):
        if extra_lines and index in extra_lines:
            lines.append(extra_lines[index])
        lines.append(json.dumps(row))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict], *, row_group_size: int = 2) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


def make_hub_cache(cache: Path, files: dict[str, list[dict]], *, sha: str = FAKE_SHA,
                   ref: str = "main", repo_id: str = HUB_DATASET) -> Path:
    """Lay out `files` like huggingface_hub's cache of dataset `repo_id` at `ref` -> `sha`."""
    repo_dir = cache / ("datasets--" + repo_id.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / ref).write_text(sha, encoding="utf-8")
    for name, rows in files.items():
        write_jsonl(repo_dir / "snapshots" / sha / name, rows)
    return repo_dir
