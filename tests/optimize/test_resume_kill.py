"""Kill -9 an optimizer job at a random point of its optimize phase, rerun the same command:
the final `result.json` equals an uninterrupted run's and no rollout is charged twice
(`tests/helpers_resume.py`). One real kill per resume mechanism: retrace (gepa, here) and
fast-forward (tavo, in `test_tavo.py`); every other method runs the in-process check
(`assert_interrupted_resumes_to_whole`) in its own test file, mipro's here."""

import pytest

from tests.helpers_resume import assert_interrupted_resumes_to_whole, assert_resumes_to_whole
from tests.scripted_server import scripted_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(600)


@pytest.mark.slow
def test_a_killed_retracing_job_resumes_to_the_uninterrupted_result(scripted, tmp_path):
    assert_resumes_to_whole(scripted, tmp_path, "gepa")


@pytest.mark.slow
def test_an_interrupted_mipro_job_resumes_to_the_uninterrupted_result(scripted, tmp_path,
                                                                       monkeypatch):
    assert_interrupted_resumes_to_whole(scripted, tmp_path, monkeypatch, "mipro")
