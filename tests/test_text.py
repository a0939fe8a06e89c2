"""`lcb.text.clip`, the one clipping rule, and the presets lcb uses (each keeps its output)."""

from __future__ import annotations

import pytest

from lcb.agents.tools import clip_output
from lcb.optimize.outcomes import one_line
from lcb.text import CLIP_NOTE, ELLIPSIS, HEAD_ONLY, clip, clip_feedback


@pytest.mark.parametrize("limit, expected", [
    (6, "abcd" + CLIP_NOTE + "ij"),  # head 2/3 of the limit, the rest from the tail
    (1, "a" + CLIP_NOTE + "j"),      # at least one character each side
    (10, "abcdefghij"),              # short enough: itself
    (0, "abcdefghij"),               # no limit
])
def test_clip_keeps_two_thirds_head_and_the_rest_tail(limit, expected):
    assert clip("abcdefghij", limit) == expected


def test_clip_says_how_much_it_cut_and_can_cut_the_head_only():
    assert clip("abcdefghij", 4, head=(1, 2), note="<{cut}>") == "ab<6>ij"
    assert clip("abcdefghij", 4, head=HEAD_ONLY, note=ELLIPSIS) == "abcd..."


def test_the_presets_keep_their_shapes():
    text = "h" * 1500 + "m" * 1000 + "t" * 500
    assert clip_feedback(text) == "h" * 1000 + "\n…[1000 chars cut]…\n" + "m" * 500 + "t" * 500
    assert clip_output(text) == "h" * 1500 + "\n... [1000 characters cut] ...\n" + "t" * 500
    assert one_line("a  b\n" * 100, 7) == "a b a b..."
