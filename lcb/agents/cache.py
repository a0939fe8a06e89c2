"""A response cache for model calls: SQLite files in one directory, keyed by the request.

Contract:
- `cache_key(...)` is the sha256 (hex) of the canonical JSON of: the model id, the message list
  as sent (OpenAI's wire format: `langchain_core.messages.convert_to_openai_messages`), the tools
  (OpenAI function schemas: names, descriptions, parameters), the sampling settings
  (temperature, top_p, max_tokens and the extra body: vLLM's extras, the thinking switch), the
  request seed, the sample index, the purpose (`PURPOSES`: batch / optimize / validate / test /
  reflect / judge / probe) and the agent id (replicas of one role send the same messages; with
  request seeds off, their id is all that tells them apart). The endpoint URL and the API key
  are not in it: the same request to another server of the same model is a hit.
- `ResponseCache(directory)` writes to `DIR/<hostname>-<pid>.sqlite` (made at the first store,
  WAL journal) and reads every `DIR/*.sqlite`: its own file first, then the others in name
  order; a file another process made later is found at the next miss. So concurrent processes
  and shards never write to one file, and each sees what the others stored. With
  `replay=True` it never writes (and makes no file).
- `put(key, reply)` stores a complete reply (`CachedReply`: content, tool calls, finish reason,
  usage with prompt / completion / reasoning tokens); the first reply stored for a key stays.
  Errors are never stored: the gateway stores only answers (`lcb.agents.llm`). A store that
  fails (a full disk) is logged once and counted in `write_errors`; the call keeps its answer.
  A file in the directory that is not a cache is skipped; one that cannot be read otherwise is
  skipped with a warning. Other files are opened read-only (immutable in a read-only copy), and
  `close()` leaves this process's file in the rollback-journal mode, so a copied or mounted
  read-only cache replays.
- Safe with concurrent asyncio calls: `get` and `put` are short synchronous statements (no
  await inside, a lock for threads), so no two interleave.
- `open_cache(directory, replay=...)` is None without a directory; it first runs
  `check_cache` (`lcb.agents.cachedir`, re-exported here).
- `ResponseCache.close()` may be called more than once; a later `get`/`put` opens again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages

from lcb.agents.cachedir import CacheError, check_cache
from lcb.agents.models import ModelConfig, extra_body
from lcb.io import json_text

__all__ = ["PURPOSES", "CacheError", "CachedReply", "ResponseCache", "cache_key", "check_cache",
           "open_cache", "request_sampling"]
PURPOSES = ("batch", "optimize", "validate", "test", "reflect", "judge", "probe")
KEY_VERSION = 1  # bump when the key's ingredients change: old entries then miss
_SCHEMA = ("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, reply TEXT NOT NULL, "
           "model TEXT, purpose TEXT, stored_at REAL)")
_SCALARS = (str, int, float, bool, type(None))
log = logging.getLogger("lcb.cache")


def cache_key(*, model_id: str, messages: Sequence[BaseMessage] | Sequence[Mapping[str, Any]],
              tools: Sequence[Mapping[str, Any]], sampling: Mapping[str, Any],
              seed: int | None, sample: int, purpose: str, agent: str) -> str:
    """The key of one request (module docstring). `messages` are LangChain messages or
    OpenAI-format dicts; `tools` OpenAI function schemas."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown cache purpose {purpose!r}; known: {', '.join(PURPOSES)}")
    wire = [m if isinstance(m, Mapping) else convert_to_openai_messages(m) for m in messages]
    payload = {"v": KEY_VERSION, "model": model_id, "messages": wire, "tools": list(tools),
               "sampling": dict(sampling), "seed": seed, "sample": sample,
               "purpose": purpose, "agent": agent}
    # json_text: a message may hold a lone surrogate (a model's reply passed on), which UTF-8
    # cannot encode; other text hashes exactly as json.dumps(..., ensure_ascii=False) gives it.
    text = json_text(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedReply:
    """One complete answer as the stream delivered it (before `<think>` is stripped)."""

    content: Any
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    invalid_tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None  # LangChain's usage_metadata
    metadata: dict[str, Any] = field(default_factory=dict)  # finish_reason, model_name, ...

    @classmethod
    def of(cls, message: AIMessage) -> CachedReply:
        meta = {k: v for k, v in message.response_metadata.items() if isinstance(v, _SCALARS)}
        return cls(content=message.content, tool_calls=[dict(c) for c in message.tool_calls],
                   invalid_tool_calls=[dict(c) for c in message.invalid_tool_calls],
                   usage=dict(message.usage_metadata) if message.usage_metadata else None,
                   metadata=meta)

    def message(self) -> AIMessage:
        return AIMessage(content=self.content, tool_calls=self.tool_calls,
                         invalid_tool_calls=self.invalid_tool_calls, usage_metadata=self.usage,
                         response_metadata=dict(self.metadata))

    @property
    def finish_reason(self) -> str | None:
        finish = self.metadata.get("finish_reason")
        return finish if isinstance(finish, str) else None


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30.0, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA busy_timeout = 30000")
    return db


def _reader(path: Path) -> sqlite3.Connection:
    """Another file, read only. A read-only copy (a shipped cache, a mounted artifact) cannot
    take the WAL side files a normal reader writes: it is opened immutable then."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0,
                         check_same_thread=False, isolation_level=None)
    try:
        db.execute("SELECT 1 FROM replies LIMIT 1")
        return db
    except sqlite3.DatabaseError as err:
        if _not_a_cache(err):
            return db  # a file being made (its table comes with its first store), or junk
        db.close()
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True,
                           check_same_thread=False, isolation_level=None)


class ResponseCache:
    """The cache in one directory (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike[str], *, replay: bool = False):
        self.directory = Path(directory)
        self.replay = replay
        self.own = self.directory / f"{_safe(socket.gethostname())}-{os.getpid()}.sqlite"
        self._writer: sqlite3.Connection | None = None
        self._readers: dict[Path, sqlite3.Connection] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = self.stored = self.write_errors = 0

    def get(self, key: str) -> CachedReply | None:
        """The stored reply for `key`, or None (a miss)."""
        with self._lock:
            found = self._lookup(key)
            if found is None:
                self._scan()  # files made since: another process or shard
                found = self._lookup(key)
            if found is None:
                self.misses += 1
                return None
            self.hits += 1
        data = json.loads(found)
        return CachedReply(**data)

    def put(self, key: str, reply: CachedReply, *, model: str, purpose: str,
            replace: bool = False) -> None:
        """Store a complete reply for `key` (the first one stored stays, unless `replace`:
        then this one, in this process's file); never in replay."""
        if self.replay:
            return
        text = json_text(asdict(reply))  # sqlite stores UTF-8: a lone surrogate is escaped
        verb = "REPLACE" if replace else "IGNORE"
        with self._lock:
            try:
                self._own_db().execute(f"INSERT OR {verb} INTO replies VALUES (?, ?, ?, ?, ?)",
                                       (key, text, model, purpose, time.time()))
            except (sqlite3.Error, OSError) as err:  # the answer stands; only the copy is lost
                if not self.write_errors:
                    log.warning("response cache %s: cannot store a reply (%s); the run goes "
                                "on without storing", self.own, err)
                self.write_errors += 1
                return
            self.stored += 1

    def close(self) -> None:
        """Close every connection (a later call opens them again). The file this process wrote
        goes back to a plain rollback journal, so a read-only copy of the directory reads."""
        with self._lock:
            if self._writer is not None:
                try:
                    self._writer.execute("PRAGMA journal_mode = DELETE")
                except sqlite3.DatabaseError as err:
                    log.warning("cache: %s stays in WAL mode: %s", self.own, err)
            for db in [*self._readers.values(), *([self._writer] if self._writer else [])]:
                db.close()
            self._readers.clear()
            self._writer = None

    def _own_db(self) -> sqlite3.Connection:
        if self._writer is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            db = _connect(self.own)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute(_SCHEMA)
            self._writer = db
        return self._writer

    def _scan(self) -> None:
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob("*.sqlite")):
            if path != self.own and path not in self._readers:
                self._readers[path] = _reader(path)

    def _own_source(self) -> sqlite3.Connection | None:
        """This process's file: the writer (made on demand), or a reader in replay."""
        if self._writer is not None or not self.own.exists():
            return self._writer
        if not self.replay:
            return self._own_db()
        if self.own not in self._readers:
            self._readers[self.own] = _reader(self.own)
        return self._readers[self.own]

    def _lookup(self, key: str) -> str | None:
        own = self._own_source()
        others = [db for path, db in sorted(self._readers.items()) if path != self.own]
        for db in ([own] if own is not None else []) + others:
            try:
                row = db.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
            except sqlite3.DatabaseError as err:
                if not _not_a_cache(err):
                    log.warning("cache: cannot read a file of %s: %s", self.directory, err)
                continue
            if row is not None:
                return str(row[0])
        return None


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "host"


def open_cache(directory: str | os.PathLike[str] | None, *, replay: bool = False
               ) -> ResponseCache | None:
    """The cache in `directory` (checked first), or None without one."""
    check_cache(directory, replay=replay)
    return None if directory is None else ResponseCache(directory, replay=replay)


def request_sampling(config: ModelConfig) -> dict[str, Any]:
    """Every sampling setting a request of `config` sends (the key's `sampling`)."""
    return {"temperature": config.temperature, "top_p": config.top_p,
            "max_tokens": config.max_tokens, "extra_body": extra_body(config)}


def _not_a_cache(err: sqlite3.DatabaseError) -> bool:
    """A file skipped quietly: one still being made (no table yet), or not SQLite at all."""
    text = str(err)
    return "no such table" in text or "file is not a database" in text
