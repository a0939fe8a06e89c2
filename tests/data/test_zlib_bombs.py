"""zlib-bomb rows cost next to nothing: `lcb problems` refuses them in little memory and time.

`private_test_cases` is base64(zlib(pickle(JSON text))). The bombs are built here without ever
holding their inflated data: one deflate block of 16 MiB of zeros, flushed so it stands alone,
is repeated, and the zlib checksum is computed over the zeros chunk by chunk.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from helpers_data import stdin_row, write_jsonl

from lcb.data import rowcheck
from lcb.data.datasets import load_problems
from lcb.data.pickled import text_end
from lcb.data.problems import RowError, decode_row, encode_private_tests

REPO = Path(__file__).resolve().parents[2]
ZEROS = bytes(16 << 20)
ZERO_BLOCKS = 128  # 2 GiB of zeros: twice the default cap
PEAK_LIMIT = 400 << 20
TIME_LIMIT_S = 15.0
CASES = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]


def zlib_stream(head: bytes, zero_blocks: int, tail: bytes = b"") -> bytes:
    """A valid zlib stream of `head`, `zero_blocks` x 16 MiB of zeros, then `tail`."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw: the zlib header and check are ours
    start = deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(ZEROS) + deflate.flush(zlib.Z_FULL_FLUSH)  # stands alone
    end = deflate.compress(tail) + deflate.flush()
    check = zlib.adler32(head)
    for _ in range(zero_blocks):
        check = zlib.adler32(ZEROS, check)
    check = zlib.adler32(tail, check)
    return b"\x78\xda" + start + block * zero_blocks + end + check.to_bytes(4, "big")


def bomb_row(qid: str, head: bytes, zero_blocks: int = ZERO_BLOCKS) -> dict:
    blocks, tail = UNDER_CAP.get(qid, (zero_blocks, b""))
    stream = base64.b64encode(zlib_stream(head, min(blocks, zero_blocks), tail)).decode("ascii")
    return {**stdin_row(qid), "private_test_cases": stream}


# PROTO 4, BINUNICODE8 declaring 8 GiB of text
DECLARES_GIGABYTES = b"\x80\x04\x8d" + (8 << 30).to_bytes(8, "little")
SMALL_TEXT = pickle.dumps(json.dumps(CASES))  # a whole, valid pickle: zeros follow its STOP
# A whole, valid pickle of 1008 MiB of zeros as one text (under the cap), then MEMOIZE, STOP
UNDER_CAP_BLOCKS = 63
DECLARES_UNDER_CAP = b"\x80\x04\x8d" + (UNDER_CAP_BLOCKS * len(ZEROS)).to_bytes(8, "little")
UNDER_CAP = {"zeros-under-cap": (UNDER_CAP_BLOCKS, b"\x94.")}  # qid: its blocks and tail
BOMBS = {
    "declares-8GiB": (DECLARES_GIGABYTES, "decompresses to more than 1 GiB"),
    "small-then-zeros": (SMALL_TEXT, "invalid pickle: more data after its text"),
    "no-pickle": (b"", "invalid pickle: not one pickled text"),
    "zeros-under-cap": (DECLARES_UNDER_CAP, "decompressed text is not a JSON list of tests"),
}


def test_the_bomb_builder_makes_a_valid_stream():
    inflated = zlib.decompress(zlib_stream(b"head", 2))
    assert inflated == b"head" + bytes(2 * len(ZEROS))


# Starts the command from a small interpreter and reports its peak RSS: a child's ru_maxrss
# includes the RSS of the process that forked it (up to its exec), so the command cannot be
# started from this test process, whose size grows with the suite.
MEASURE = """\
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _run_problems(path: Path, tmp_path: Path) -> tuple[int, str, str, int, float]:
    """`lcb problems --json --data path` in a subprocess: (status, stdout, stderr, peak RSS in
    bytes, seconds). The peak is the command's own (see MEASURE)."""
    env = {k: v for k, v in os.environ.items() if k != rowcheck.MAX_ROW_BYTES_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    code = ("import sys, typer; from lcb.cli import app; "
            "typer.main.get_group(app).main(sys.argv[1:], prog_name='lcb')")
    out, err, peak = tmp_path / "stdout", tmp_path / "stderr", tmp_path / "peak"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-S", "-c", MEASURE, str(peak), sys.executable,
                               "-c", code, "problems", "--json", "--data", str(path)],
                              stdout=stdout, stderr=stderr, env=env, cwd=REPO, timeout=120,
                              check=False)
        elapsed = time.monotonic() - started
    return (proc.returncode, out.read_text(), err.read_text(), int(peak.read_text()),
            elapsed)


@pytest.mark.slow
def test_lcb_problems_refuses_zlib_bombs_in_little_memory_and_time(tmp_path):
    rows = [stdin_row("good1"), *(bomb_row(qid, head) for qid, (head, _) in BOMBS.items()),
            stdin_row("good2")]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    status, stdout, stderr, peak, elapsed = _run_problems(path, tmp_path)
    assert status == 0, stderr
    assert [json.loads(line)["id"] for line in stdout.splitlines()] == ["good1", "good2"]
    assert "Traceback" not in stderr and f"skipped {len(BOMBS)} row(s):" in stderr
    for qid, (_, reason) in BOMBS.items():
        assert any(line.startswith(f"  {qid}: ") and "field 'private_test_cases'" in line
                   and reason in line for line in stderr.splitlines()), (qid, stderr)
    assert peak <= PEAK_LIMIT, f"peak RSS {peak >> 20} MiB"
    assert elapsed <= TIME_LIMIT_S, f"{elapsed:.1f} s"


@pytest.mark.parametrize("qid", sorted(BOMBS))
def test_each_bomb_is_refused_by_decode_row_naming_the_field(qid):
    head, reason = BOMBS[qid]
    with pytest.raises(RowError) as info:
        decode_row(bomb_row(qid, head, zero_blocks=4))
    assert info.value.field == "private_test_cases"
    assert reason.split(" 1 GiB")[0] in info.value.reason


@pytest.mark.parametrize("start", [
    b"\x00" * 64, b"junk", b"[[[[", b'{"input": "1"}', b"[" + b" " * 2000, b'"[{"'])
def test_a_long_text_that_cannot_start_a_list_of_tests_is_refused_unread(start):
    # Declared 1008 MiB, but the stream holds 1 KiB or so: the refusal reads only its start.
    head = DECLARES_UNDER_CAP + start
    row = {**stdin_row("odd"), "private_test_cases":
           base64.b64encode(zlib_stream(head + bytes(2048), 0)).decode("ascii")}
    with pytest.raises(RowError, match="not a JSON list of tests"):
        decode_row(row)


@pytest.mark.parametrize("start", [b'[{"input": "1", "output": "2"}', b' \n\t[ \r\n{"in', b"[]"])
def test_a_long_text_that_starts_as_a_list_of_tests_is_read(start):
    text = start + b" " * 4096 + b"x"  # longer than the probe; not valid JSON in the end
    blob = b"\x80\x04\x8d" + len(text).to_bytes(8, "little") + text + b"\x94."
    row = {**stdin_row("ok"), "private_test_cases":
           base64.b64encode(zlib.compress(blob)).decode("ascii")}
    with pytest.raises(RowError) as info:
        decode_row(row)
    assert "not a JSON list of tests" not in info.value.reason
    assert "decompressed text is not JSON" in info.value.reason  # read whole, then parsed


# Ordinary rows still load

@pytest.mark.parametrize("protocol", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("size", [10, 300, 70_000])  # a framed, a longer and an unframed text
def test_a_pickled_text_loads_at_every_binary_protocol(protocol, size):
    cases = [{"input": "x" * size, "output": "1\n", "testtype": "stdin"}]
    blob = pickle.dumps(json.dumps(cases), protocol=protocol)
    assert text_end(blob[:20]) in range(len(blob) - 6, len(blob))
    row = {**stdin_row("ok"), "private_test_cases":
           base64.b64encode(zlib.compress(blob)).decode("ascii")}
    assert decode_row(row).private_tests[0].input == "x" * size


def test_the_sample_set_and_the_official_encoding_still_load():
    loaded = load_problems("sample")
    assert loaded.problems and not loaded.skipped
    assert all(p.private_tests for p in loaded.problems)
    row = {**stdin_row("enc"), "private_test_cases": encode_private_tests(CASES * 3)}
    assert len(decode_row(row).private_tests) == 3


@pytest.mark.parametrize(("blob", "reason"), [
    (pickle.dumps(json.dumps(CASES)) + b"junk", "more data after its end"),
    (pickle.dumps(json.dumps(CASES))[:-1], "invalid pickle"),  # no STOP
    (pickle.dumps((json.dumps(CASES), "x")), "expected JSON text"),  # a tuple, not a text
])
def test_a_stream_that_is_not_exactly_one_pickled_text_is_refused(blob, reason):
    row = {**stdin_row("odd"), "private_test_cases":
           base64.b64encode(zlib.compress(blob)).decode("ascii")}
    with pytest.raises(RowError, match=reason):
        decode_row(row)
