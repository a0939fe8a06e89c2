"""Kill -9 an optimizer job at a random point of its optimize phase, rerun the same command:
the final `result.json` equals an uninterrupted run's and no rollout is charged twice
(`tests/helpers_resume.py`). Each native method runs the same check in its own test file."""

import pytest

from tests.helpers_resume import assert_resumes_to_whole
from tests.scripted_server import scripted_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(600)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["gepa", "mipro"])
def test_a_killed_job_resumes_to_the_uninterrupted_result(scripted, tmp_path, method):
    assert_resumes_to_whole(scripted, tmp_path, method)
