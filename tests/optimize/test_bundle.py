"""Prompt bundles: validation of proposals, stable hashes, no mutation of inputs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lcb.agents.prompts import SEED_ROLES, seed_bundle
from lcb.optimize.bundle import (
    BundleError,
    bundle_hash,
    check_bundle,
    freeze,
    template_slots,
    thaw,
    unclosed_fence,
    updated,
    validate_bundle,
)

ROOT = Path(__file__).resolve().parents[2]
SEED = {"manager": "Lead the team.\nYour workers:\n{workers}", "coder": "Write Python 3 code."}


@pytest.mark.parametrize("topology", sorted(SEED_ROLES))
def test_every_seed_bundle_validates_against_itself(topology):
    seed = seed_bundle(topology)
    assert validate_bundle(seed, seed=seed) == {role: text.strip() for role, text in seed.items()}


def test_valid_proposal_is_trimmed_copied_and_in_seed_order():
    proposal = {"coder": "  Test first.\n```python\nprint({1: 2})\n```\n", "manager":
                "Delegate.\n{workers}\nUse `{x}` and ```text``` freely."}
    clean = validate_bundle(proposal, seed=SEED)
    assert list(clean) == ["manager", "coder"]
    assert clean["coder"].startswith("Test first.") and clean is not proposal
    assert proposal["coder"].startswith("  ")  # the input is untouched


@pytest.mark.parametrize("candidate, fragment", [
    ({"manager": "x {workers}"}, "missing role(s) ['coder']"),
    ({**SEED, "tester": "Test."}, "unknown role(s) ['tester']"),
    ({**SEED, "coder": "   \n"}, "coder: text is empty"),
    ({**SEED, "coder": None}, "coder: text must be a string"),
    ({**SEED, "coder": "Here:\n```python\nprint(1)\n"}, "coder: a code fence is opened"),
    ({**SEED, "manager": "Lead the team alone."}, "['workers'] of the seed prompt were removed"),
    ({**SEED, "coder": "Code. {workers}"}, "coder: unknown or unfilled template marker(s) "
                                            "['{workers}']"),
    ({**SEED, "coder": "Do {instruction} well."}, "['{instruction}']"),
    ({**SEED, "coder": "Be {{ style }}."}, "['{{ style }}']"),
    ({**SEED, "coder": "<new instruction>"}, "['<new instruction>']"),
    ({**SEED, "coder": "Plan. [INSERT improved rules here]"}, "[INSERT improved rules here]"),
])
def test_invalid_proposals_are_refused_with_the_reason(candidate, fragment):
    with pytest.raises(BundleError) as caught:
        validate_bundle(candidate, seed=SEED)
    assert fragment in str(caught.value)


def test_every_problem_is_reported_at_once():
    problems = check_bundle({"manager": "", "extra": "x"}, seed=SEED)
    assert len(problems) == 3  # missing coder, unknown extra, empty manager
    assert check_bundle(["not", "a", "mapping"], seed=SEED)[0].startswith("a bundle must be")


def test_fences_and_slots_ignore_code():
    assert not unclosed_fence("a\n```python\nx\n```\nb\n~~~\ny\n~~~")
    assert unclosed_fence("````\n```\ninner\n```\n")  # a shorter fence does not close ````
    assert template_slots("Print `{x}`.\n```python\nf'{name}'\n```\nThen {name}.") == {"{name}"}


def test_hash_is_stable_order_free_and_content_sensitive():
    reordered = dict(reversed(list(SEED.items())))
    assert bundle_hash(SEED) == bundle_hash(reordered)
    assert bundle_hash(SEED) != bundle_hash({**SEED, "coder": "Write Python 3 code. "})
    assert len(bundle_hash(SEED)) == 16
    code = ("import json,sys; from lcb.optimize.bundle import bundle_hash; "
            "print(bundle_hash(json.loads(sys.argv[1])))")
    other = subprocess.run([sys.executable, "-c", code, json.dumps(SEED)], capture_output=True,
                           text=True, check=True, cwd=ROOT, env={"PYTHONHASHSEED": "7"})
    assert other.stdout.strip() == bundle_hash(SEED)


def test_freeze_is_read_only_and_detached_updated_returns_a_new_bundle():
    source = dict(SEED)
    frozen = freeze(source)
    source["coder"] = "changed"
    assert frozen["coder"] == "Write Python 3 code."
    with pytest.raises(TypeError):
        frozen["coder"] = "x"  # type: ignore[index]
    new = updated(frozen, {"coder": "Use sets."})
    assert new == {**SEED, "coder": "Use sets."} and frozen["coder"] == SEED["coder"]
    copy = thaw(frozen)
    copy["manager"] = "y"
    assert frozen["manager"] == SEED["manager"]
    with pytest.raises(BundleError, match="unknown role"):
        updated(frozen, {"judge": "x"})
