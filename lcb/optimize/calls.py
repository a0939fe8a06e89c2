"""Uncharged model calls of the optimize phase — reflect, judge, probe — journaled for replay.

Contract:
- Three kinds (`CallKind`): `reflect` and `judge` go to the reflection model, `probe` to the
  task model (one single-agent call with a candidate prompt). None is charged; each call's
  tokens are added to the ledger under its kind, and the call is written whole (kind, purpose,
  messages, answer, tokens, sampling, seed, latency) to `DIR/calls.jsonl.gz`. Tokens the
  server did not report are null there, with `n_calls_without_usage` 1 (`lcb.agents.usage`).
- The reflection model: `REFLECTION_MODEL_BASE_URL` / `REFLECTION_MODEL_ID` /
  `REFLECTION_MODEL_API_KEY` (default: the task endpoint, model and key),
  `REFLECTION_MODEL_VLLM_EXTRAS` (0 for a hosted API; default as the task model), sampling
  `REFLECTION_SAMPLING`; a judge call defaults to temperature 0. Per-call `temperature` /
  `max_tokens` override the sampling of that call only.
- Replay: a call whose (kind, purpose, messages, sampling, seed) matches one already in the
  journal gets the journaled answer with no model call; its tokens count again in the ledger,
  which a resumed job rebuilds from zero. The seed is the call's place among the calls of its
  kind and purpose, so calls in flight at once get their own answers back whatever order they
  finished in. Failed calls are journaled with their error and never replayed.
- `calls.jsonl.gz` is one gzip stream per session, flushed after every call; a resumed job first
  rewrites the file with the complete calls it holds (a kill can cut the last one short); a
  damaged complete line refuses the resume (`ArtifactError` naming it).
- A call that fails after the client's retries raises `ReflectionError` naming the endpoint.
- With a response cache (`cache`, `lcb.agents.cache`), calls not in the journal go through it
  with their kind as the purpose.
- Requests in flight: the calls to one endpoint (its `base_urls`) share one request semaphore
  of that config's `max_concurrent_requests` (`--max-requests`), whatever their kind and
  sampling; `slots` passes in the ones already in use (the team runs' own), so that the
  job's team runs and its calls to the same endpoint are capped together.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import os
import re
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from lcb.agents.cache import ResponseCache
from lcb.agents.endpoints import redact_url
from lcb.agents.llm import ModelCallError, ModelGateway
from lcb.agents.models import ModelConfig, resolve_model
from lcb.agents.usage import TOKEN_KEYS, WITHOUT_USAGE, CallTag, UsageLedger
from lcb.io import BadJson, atomic_writer, json_text, loads
from lcb.optimize.artifacts import ArtifactError
from lcb.optimize.budget import BudgetLedger
from lcb.optimize.method import ReflectionError
from lcb.optimize.seeds import Phase, request_seed

CALLS_LOG = "calls.jsonl.gz"
REFLECTION_SAMPLING: dict[str, Any] = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 4096}
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class CallKind(StrEnum):
    REFLECT = "reflect"
    JUDGE = "judge"
    PROBE = "probe"


def reflection_config(task: ModelConfig, *, environ: Mapping[str, str] | None = None
                      ) -> ModelConfig:
    """The reflection model's config: the `REFLECTION_MODEL_*` variables over the task model."""
    env = os.environ if environ is None else environ
    base_url = (env.get("REFLECTION_MODEL_BASE_URL") or task.base_url).rstrip("/")
    model_id = resolve_model(env.get("REFLECTION_MODEL_ID") or task.model_id)
    api_key = env.get("REFLECTION_MODEL_API_KEY") or task.api_key
    extras = _env_flag(env, "REFLECTION_MODEL_VLLM_EXTRAS", default=task.vllm_extras)
    return replace(task, base_url=base_url, model_id=model_id, api_key=api_key,
                   vllm_extras=extras, **REFLECTION_SAMPLING)


def _env_flag(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    """A yes/no environment variable (1/0, true/false, yes/no); `default` when unset."""
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"environment variable {name}={raw!r}: expected 1/0, true/false or yes/no")


class CallJournal:
    """`calls.jsonl.gz`: what was asked and answered (see the module docstring)."""

    def __init__(self, job_dir: Path) -> None:
        self.path = Path(job_dir) / CALLS_LOG
        self.lines = _read_calls(self.path)
        if self.lines or self.path.exists():  # rewrite whole, so the next stream starts clean
            _rewrite(self.path, self.lines)
        self._answers: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for line in self.lines:
            if line.get("error") is None:
                self._answers[line["key"]].append(line)
        self.served: Counter[str] = Counter()
        self._stream: gzip.GzipFile | None = None

    def replay(self, key: str) -> dict[str, Any] | None:
        """The next journaled answer to a call with `key`, or None."""
        answers = self._answers.get(key, [])
        index = self.served[key]
        if index >= len(answers):
            return None
        self.served[key] += 1
        return answers[index]

    def append(self, line: dict[str, Any]) -> None:
        if self._stream is None:
            self._stream = gzip.GzipFile(self.path, mode="ab", mtime=0)
        self._stream.write((json_text(line) + "\n").encode("utf-8"))  # any string
        self._stream.flush()  # a sync flush: every complete call is readable after a kill
        self.lines.append(line)
        if line.get("error") is None:
            self._answers[line["key"]].append(line)
            self.served[line["key"]] += 1  # answered now: not replayed to a later call

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def _read_calls(path: Path) -> list[dict[str, Any]]:
    """Every complete line of the (possibly cut-short, multi-stream) gzip file; a damaged
    complete line raises `ArtifactError` naming it (replaying around it would not retrace the
    interrupted job)."""
    if not path.exists():
        return []
    data, text = path.read_bytes(), b""
    while data:
        inflater = zlib.decompressobj(wbits=31)
        try:
            text += inflater.decompress(data)
        except zlib.error:
            break
        if not inflater.eof:
            break
        data = inflater.unused_data
    lines = []
    for number, line in enumerate(text[:text.rfind(b"\n") + 1].split(b"\n"), 1):
        if line.strip():
            try:
                value = loads(line)
            except BadJson as exc:
                value = exc
            if not isinstance(value, dict):
                why = value if isinstance(value, BadJson) else "expected a JSON object"
                raise ArtifactError(f"{path}: line {number}: {why}; the journal is damaged, so "
                                    "the job cannot resume from it")
            lines.append(value)
    return lines


def _rewrite(path: Path, lines: Sequence[dict[str, Any]]) -> None:
    with atomic_writer(path) as handle, gzip.GzipFile(filename="", mode="wb", fileobj=handle,
                                                     mtime=0) as stream:
        for line in lines:
            stream.write((json_text(line) + "\n").encode("utf-8"))


def _messages_json(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    return [{"role": m.type, "content": str(m.content)} for m in messages]


def call_key(kind: str, purpose: str, messages: list[dict[str, str]],
             sampling: Mapping[str, Any]) -> str:
    payload = json.dumps([kind, purpose, messages, dict(sampling)], sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:24]


class ModelCalls:
    """The uncharged calls of one optimize phase (see the module docstring)."""

    def __init__(self, *, reflection: ModelConfig, task: ModelConfig, ledger: BudgetLedger,
                 optimizer_seed: int, journal: CallJournal,
                 cache: ResponseCache | None = None,
                 slots: Mapping[tuple[str, ...], asyncio.Semaphore] | None = None) -> None:
        self.reflection, self.task, self.cache = reflection, task, cache
        self.ledger, self.optimizer_seed, self.journal = ledger, optimizer_seed, journal
        self._gateways: dict[tuple, ModelGateway] = {}
        self._slots = dict(slots or {})  # endpoint list -> its request semaphore
        self._counts: Counter[str] = Counter()

    def position(self) -> dict[str, dict[str, int]]:
        """Where the calls stand (for a checkpoint): calls made per purpose, answers served."""
        return {"counts": dict(self._counts), "served": dict(self.journal.served)}

    def skip_to(self, position: dict[str, dict[str, int]]) -> None:
        """Take a checkpoint's position: the calls before it were made (a fast-forward)."""
        self._counts = Counter(position.get("counts", {}))
        self.journal.served = Counter(position.get("served", {}))

    async def ask(self, kind: CallKind, messages: Sequence[BaseMessage], *, purpose: str,
                  temperature: float | None = None, max_tokens: int | None = None) -> str:
        """The answer to `messages` (see the module docstring)."""
        if not purpose or not any(str(m.content).strip() for m in messages):
            raise ValueError(f"a {kind} call needs a purpose and a non-empty prompt")
        base = self.task if kind is CallKind.PROBE else self.reflection
        if temperature is None and kind is CallKind.JUDGE:
            temperature = 0.0
        config = replace(base, **({} if temperature is None else {"temperature": temperature}),
                         **({} if max_tokens is None else {"max_tokens": max_tokens}))
        sampling = {"temperature": config.temperature, "top_p": config.top_p,
                    "max_tokens": config.max_tokens}
        shown = _messages_json(messages)
        slot = _UNSAFE.sub("_", purpose) or str(kind)
        index = self._counts[f"{kind}|{slot}"]
        self._counts[f"{kind}|{slot}"] += 1
        seed = request_seed(optimizer_seed=self.optimizer_seed, phase=Phase.OPTIMIZE,
                            iteration=index, row=str(kind), role=slot, turn=0)
        # The seed (the call's place among its purpose's calls) is part of the key: calls in
        # flight at once finish in any order, and each must get its own answer back.
        key = call_key(kind, purpose, shown, {**sampling, "seed": seed})
        journaled = self.journal.replay(key)
        if journaled is not None:
            self.ledger.record_uncharged(
                kind, prompt_tokens=journaled["prompt_tokens"],
                completion_tokens=journaled["completion_tokens"],
                n_calls_without_usage=journaled.get(WITHOUT_USAGE, 0))  # absent: older lines
            return str(journaled["answer"])
        return await self._call(kind, messages, config=config, key=key, seed=seed,
                                line={"kind": str(kind), "purpose": purpose, "key": key,
                                      "model": config.model_id, "seed": seed, **sampling,
                                      "messages": shown})

    async def _call(self, kind: CallKind, messages: Sequence[BaseMessage], *,
                    config: ModelConfig, key: str, seed: int, line: dict[str, Any]) -> str:
        usage = UsageLedger(keep_calls=False)
        started = time.monotonic()
        tag = CallTag(str(kind), str(kind), line["purpose"][:60], str(kind), 0)
        try:
            reply = await self._gateway(config).call(list(messages), ledger=usage, seed=seed,
                                                     tag=tag, purpose=str(kind))
        except ModelCallError as exc:
            self.ledger.record_uncharged(kind, calls=1)
            self.journal.append({**line, "answer": None, "error": str(exc),
                                 "prompt_tokens": 0, "completion_tokens": 0,
                                 "latency_s": round(time.monotonic() - started, 3)})
            raise ReflectionError(f"the {kind} model {config.model_id!r} at "
                                  f"{redact_url(config.base_url)} "
                                  f"failed: {exc}") from exc
        spent = {key: usage.total().to_record()[key] for key in (*TOKEN_KEYS, WITHOUT_USAGE)}
        answer = reply.content if isinstance(reply.content, str) else reply.text
        self.ledger.record_uncharged(kind, **spent)
        self.journal.append({**line, "answer": answer, "error": None, **spent,
                             "latency_s": round(time.monotonic() - started, 3)})
        return answer

    def _gateway(self, config: ModelConfig) -> ModelGateway:
        key = (config.base_url, config.model_id, config.temperature, config.top_p,
               config.max_tokens)
        if key not in self._gateways:
            slots = self._slots.setdefault(
                config.base_urls, asyncio.Semaphore(config.max_concurrent_requests))
            self._gateways[key] = ModelGateway(config, cache=self.cache, slots=slots)
        return self._gateways[key]

    async def aclose(self) -> None:
        for gateway in self._gateways.values():
            await gateway.aclose()
        self._gateways.clear()
        self.journal.close()


def prompt_messages(prompt: str) -> list[BaseMessage]:
    return [HumanMessage(prompt)]


def probe_messages(system_prompt: str, messages: Sequence[Mapping[str, str]]
                   ) -> list[BaseMessage]:
    """The probe's chat: the candidate system prompt, then user/assistant turns."""
    chat: list[BaseMessage] = [SystemMessage(system_prompt)]
    for message in messages:
        role, content = message.get("role"), str(message.get("content", ""))
        if role == "user":
            chat.append(HumanMessage(content))
        elif role == "assistant":
            chat.append(AIMessage(content))
        else:
            raise ValueError(f"a probe message's role must be user or assistant, got {role!r}")
    return chat
