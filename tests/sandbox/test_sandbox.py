"""`lcb.sandbox.python_exec.run_python` (the agents' python_exec), one property per test.

Runs that could misbehave run inside the outer pids-cgroup guard (tests/cgroup_guard.py).
"""

from __future__ import annotations

import os
import uuid

import pytest
from cgroup_guard import pids_guard
from helpers_grading import FORK_BOMB, loopback_listener, setsid_escape

import lcb.sandbox.launch as launch
from lcb.sandbox.launch import SandboxUnavailable, check_sandbox
from lcb.sandbox.python_exec import RunResult, run_python


def guarded_run(code: str, stdin: str = "", **kwargs) -> RunResult:
    with pids_guard(max_pids=300) as guard:
        result = guard.call(_run, code, stdin, kwargs, timeout_s=120)
        assert guard.survivors(settle_s=5.0) == []
    return result


def _run(code, stdin, kwargs):
    return run_python(code, stdin, **kwargs)


def test_stdin_in_stdout_out_exit_code_zero():
    result = run_python("print(input()[::-1])", "abc\n")
    assert (result.stdout, result.stderr, result.exit_code, result.timed_out) == \
        ("cba\n", "", 0, False)


def test_exit_code_and_traceback_are_reported():
    result = run_python("import sys\nprint('partial')\nsys.stdout.flush()\n1 / 0\n")
    assert result.exit_code == 1 and result.stdout == "partial\n"
    assert "ZeroDivisionError" in result.stderr and "lcb" not in result.stderr


def test_syntax_error_reads_like_python():
    result = run_python("def f(:\n")
    assert result.exit_code == 1 and "SyntaxError" in result.stderr


def test_runs_as_main_after_the_grading_prelude_like_grading():
    # What passes grading must pass here: prelude names work without imports.
    result = run_python("print(__name__)\nprint(deque([1]), List[int], gcd(4, 6))\n")
    assert result.stdout == "__main__\ndeque([1]) typing.List[int] 2\n"
    assert result.exit_code == 0


def test_future_import_fails_as_it_does_in_grading():
    result = run_python("from __future__ import annotations\nprint(1)\n")
    assert result.exit_code == 1 and result.stdout == ""
    assert "SyntaxError" in result.stderr and "__future__" in result.stderr
    assert "lcb" not in result.stderr


def test_prelude_can_be_turned_off():
    code = ("from __future__ import annotations\n"
            "try:\n    deque\nexcept NameError:\n    print('plain')\n")
    result = run_python(code, prelude=False)
    assert (result.stdout, result.exit_code) == ("plain\n", 0)


def test_installed_packages_and_site_builtins_are_there_as_in_python():
    pytest.importorskip("numpy")
    result = run_python("import numpy\nprint(numpy.arange(3).sum())\nexit(3)")
    assert (result.stdout, result.exit_code) == ("3\n", 3)


def test_timeout_kills_and_reports():
    result = guarded_run("while True:\n    pass\n", timeout_s=1.0)
    assert result.timed_out and result.exit_code is None
    assert 1.0 <= result.wall_s < 3.0


def test_output_is_clipped_with_a_marker():
    result = run_python("print('x' * 200_000)\nimport sys\nprint('e' * 100_000, file=sys.stderr)")
    assert result.output_truncated and result.exit_code == 0
    assert len(result.stdout) < 70_000 and "clipped" in result.stdout
    assert len(result.stderr) < 70_000 and "clipped" in result.stderr


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    result = run_python("import os\nprint(sorted(os.environ), os.environ.get('OPENAI_API_KEY'))")
    assert "sk-secret-value" not in result.stdout and result.stdout.endswith(" None\n")


def test_runs_in_a_fresh_empty_directory():
    result = run_python("import os\nprint(os.getcwd())\nprint(os.listdir('.'))")
    cwd, listing = result.stdout.splitlines()
    assert cwd != os.getcwd() and listing == "[]"
    assert not os.path.exists(cwd), "the temporary directory is removed after the run"


def test_each_run_is_a_fresh_process():
    first = run_python("import os\nprint(os.getpid())").stdout
    second = run_python("import os\nprint(os.getpid())").stdout
    assert first != second


def test_setsid_grandchild_does_not_survive():
    marker = f"exec-escape-{uuid.uuid4().hex}"
    code = setsid_escape(marker, then="print('parent done')\n")
    result = guarded_run(code)
    assert result.stdout == "parent done\n"


def test_fork_bomb_is_contained():
    result = guarded_run(FORK_BOMB, timeout_s=1.0)
    assert result.timed_out


def test_bwrap_tier_blocks_network_and_writes(tmp_path):
    with loopback_listener() as port:  # reachable from this host's loopback, not the sandbox
        code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 2)\n"
                "    print('net')\nexcept OSError:\n    print('no net')\n"
                f"try:\n    open({str(tmp_path / 'f')!r}, 'w')\n    print('wrote')\n"
                "except OSError:\n    print('read-only')\n")
        result = guarded_run(code, sandbox="bwrap")
    assert result.stdout == "no net\nread-only\n"


def test_bwrap_tier_has_its_own_pid_namespace():
    result = guarded_run("import os\nprint(len([p for p in os.listdir('/proc') if p.isdigit()]))",
                         sandbox="bwrap")
    assert int(result.stdout) < 10


def test_missing_bwrap_is_a_clear_configuration_error(monkeypatch):
    monkeypatch.setattr(launch.shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install -y bubblewrap"):
        check_sandbox("bwrap")
    with pytest.raises(SandboxUnavailable):
        run_python("print(1)", sandbox="bwrap")


def test_bwrap_is_installed_here():
    # CI installs bubblewrap; its absence must fail loudly rather than skip the bwrap tests.
    check_sandbox("bwrap")


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="unknown sandbox"):
        run_python("print(1)", sandbox="docker")
    with pytest.raises(ValueError, match="timeout_s"):
        run_python("print(1)", timeout_s=0)
    with pytest.raises(TypeError):
        run_python(b"print(1)")
