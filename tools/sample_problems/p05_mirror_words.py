"""Mirror Words (Codeforces-style, easy, stdin): multi-line answers, trailing whitespace."""

from random import Random

from ._kit import Case, SampleProblem, date, explained, lines

BODY = """\
A word is called a mirror word if it reads the same from left to right and from right to left
when uppercase and lowercase forms of a letter are treated as equal. For example, "Level" and
"noON" are mirror words, while "Mirror" is not.

You are given $t$ words. For each of them, decide whether it is a mirror word.

Input

The first line contains a single integer $t$ ($1 \\le t \\le 1000$) — the number of words.

Each of the next $t$ lines contains one word $s$ ($1 \\le |s| \\le 100$) consisting of
English letters.

Output

For each word, print "YES" if it is a mirror word and "NO" otherwise, one answer per line."""


def oracle(text: str, *, pad: str = "") -> str:
    """Answers one per line; `pad` is appended to each line (the grader strips it)."""
    words = text.split()[1:]
    answers = ["YES" if word.lower() == word.lower()[::-1] else "NO" for word in words]
    return "".join(answer + pad + "\n" for answer in answers)


def _word(rng: Random, length: int, mirrored: bool) -> str:
    half = "".join(rng.choice("abcXYZ") for _ in range(length // 2))
    middle = rng.choice("qQ") if length % 2 else ""
    tail = half[::-1] if mirrored else "".join(rng.choice("abcXYZ") for _ in range(length // 2))
    word = half + middle + tail
    return "".join(ch.swapcase() if rng.random() < 0.3 else ch for ch in word)


def build() -> SampleProblem:
    rng = Random(505)
    sample = lines(4, "Level", "Mirror", "a", "noON")
    public = (explained(Case(sample, oracle(sample)), '"Mirror" read backwards is "rorriM".'),)
    random_words = [_word(rng, rng.randint(1, 100), rng.random() < 0.5) for _ in range(300)]
    inputs = [lines(1, "Z"), lines(2, "ab", "Aa"), lines(3, "abBA", "abca", "xyzzYX"),
              lines(len(random_words), *random_words)]
    # Expected outputs with trailing spaces and a blank last line: graders must ignore them.
    private = tuple(Case(text, oracle(text, pad=" " if i % 2 else "") + ("\n" if i == 2 else ""))
                    for i, text in enumerate(inputs))
    return SampleProblem(
        id="lcbs_9901_A", title="Mirror Words", platform="codeforces",
        contest_id="lcbs_9901", contest_date=date("2023-07-22"), difficulty="easy",
        body=BODY, constraints="", public=public, private=private,
    )
