"""lcb installed from a wheel grades as an editable checkout does (issue #21, item 3).

Installed regularly, lcb lives in `site-packages` beside every package a program may import.
Programs must still import those (numpy and all), and must still not read lcb's own source or
its bundled sample tests and solutions. Each test builds a wheel of this checkout, installs it
with `--no-deps` into a fresh venv (numpy and a small package beside it, hard-linked from this
venv: no network), and grades programs with that venv's interpreter inside a pids-cgroup guard.
The venv lies under /tmp (each program's private /tmp covers it; it is bound back) and under
/var/tmp (Landlock alone decides what is readable).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cgroup_guard import pids_guard

REPO = Path(__file__).resolve().parents[2]

DRIVER = """\
import json, sys
import lcb
from lcb.data.problems import Mode, Problem, Test
from lcb.grading import GradingPool

def problem(expected):
    return Problem(id="wheel", title="wheel", statement="-", starter_code="", mode=Mode.STDIN,
                   fn_name=None, public_tests=(), private_tests=(Test("", expected, Mode.STDIN),),
                   difficulty="easy", platform="atcoder", contest_id="c", contest_date="2024-01-01")

programs = json.loads(sys.argv[1])
with GradingPool(1) as pool:
    grades = {name: pool.grade_sync(problem(expected), code)
              for name, (code, expected) in programs.items()}
print(json.dumps({"lcb": lcb.__file__, **{name: [g.em, g.feedback and g.feedback.actual,
                                                 g.feedback and g.feedback.error[-600:]]
                                          for name, g in grades.items()}}))
"""
# numpy.fft is imported on first use (numpy 2): the program's own import reads site-packages.
NUMPY = "import numpy as np\nprint(int(np.fft.fft(np.arange(4)).real[0]))\n"
PACKAGE = "import wheelprobe\nprint(wheelprobe.VALUE)\n"
SNOOP = """\
import os, sys
import lcb  # in the host's memory (the zygote imported lcb's grading code): not its files
here = os.path.dirname(lcb.__file__)
site = os.path.dirname(here)
paths = [os.path.join(here, "__init__.py"), os.path.join(here, "sandbox", "judge.py"),
         os.path.join(here, "data", "sample", "test.jsonl"),
         os.path.join(site, {dist_info!r}, "RECORD")]
paths += [os.path.join(p, "lcb", "data", "sample", "test.jsonl") for p in sys.path if p]
read = []
for path in paths:
    try:
        with open(path, "rb") as fh:
            if fh.read(1):
                read.append(path)
    except OSError:
        pass
print(read)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel of this checkout, built from a copy (the checkout is not written)."""
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    pytest.importorskip("numpy")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "lcb", src / "lcb", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "--no-index", "-w", str(dist), str(src)],
                   check=True, capture_output=True)
    [built] = dist.glob("lcb-*.whl")
    return built


def _link_tree(source: Path, target: Path) -> None:
    try:
        shutil.copytree(source, target, copy_function=os.link)
    except (OSError, shutil.Error):  # another file system: copy
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)


def install(wheel: Path, where: Path) -> Path:
    """A fresh venv at `where` with the wheel (no deps), numpy and `wheelprobe`; its python."""
    import numpy

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True)
    [site] = where.glob("lib/python*/site-packages")
    numpy_dir = Path(numpy.__file__).parent
    for source in [numpy_dir, *numpy_dir.parent.glob(f"numpy-{numpy.__version__}.dist-info"),
                   *numpy_dir.parent.glob("numpy.libs")]:
        _link_tree(source, site / source.name)
    (site / "wheelprobe").mkdir()
    (site / "wheelprobe" / "__init__.py").write_text("VALUE = 'imported'\n")
    return python


def grade_in(python: Path, dist_info: str) -> dict:
    programs = {"numpy": [NUMPY, "6\n"], "package": [PACKAGE, "imported\n"],
                "snoop": [SNOOP.format(dist_info=dist_info), "[]\n"]}
    with pids_guard(max_pids=400) as guard:
        proc = guard.popen([str(python), "-c", DRIVER, json.dumps(programs)], cwd="/",
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=120)
        assert guard.survivors(settle_s=5.0) == [], "a process outlived the grading"
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.splitlines()[-1])


@pytest.fixture(params=["tmp", "var_tmp"])
def venv_dir(request, tmp_path):
    if request.param == "tmp":
        yield tmp_path / "venv"
        return
    if not os.access("/var/tmp", os.W_OK):
        pytest.skip("no writable /var/tmp")
    base = Path(tempfile.mkdtemp(prefix="lcb-wheel-test-", dir="/var/tmp"))
    try:
        yield base / "venv"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_a_wheel_install_imports_packages_and_hides_lcb(wheel, venv_dir):
    python = install(wheel, venv_dir)
    dist_info = wheel.name.split("-py")[0] + ".dist-info"
    got = grade_in(python, dist_info)
    assert got["lcb"].startswith(str(venv_dir)), got["lcb"]  # the wheel's lcb, not the checkout
    assert got["numpy"][0] == 1, got["numpy"]
    assert got["package"][0] == 1, got["package"]
    assert got["snoop"][0] == 1, f"a program read lcb's own files: {got['snoop']}"
