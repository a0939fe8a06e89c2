"""`lcb.io.atomic_writer`, the one way lcb replaces a whole file: all or nothing, on disk before
it returns, no temporary file left behind, errors named by the file asked for."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from lcb.io import atomic_writer, write_json, write_text


def test_a_write_replaces_the_file_whole_with_the_umask_mode(tmp_path):
    path = tmp_path / "deep" / "state.json"  # missing folders are made
    write_json(path, {"a": 1})
    write_text(path, "second\n")
    assert path.read_text() == "second\n"
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_an_error_in_the_block_keeps_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "kept.txt"
    write_text(path, "old")
    with pytest.raises(KeyError), atomic_writer(path) as handle:
        handle.write(b"half")
        raise KeyError("the caller failed")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["kept.txt"]


def test_a_full_disk_names_the_file_and_leaves_nothing_behind(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    write_text(path, "old")
    real = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError) as caught:
        write_json(path, {"new": True})
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(path)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]
