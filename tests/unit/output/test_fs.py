"""Output filesystems: resolving OUT, and local writes that are whole or invisible."""

from __future__ import annotations

import os

import pytest

from crawler.errors import ConfigError, StorageError
from crawler.output import open_fs
from crawler.output.fs import is_local, list_names, publish, write_local_atomic

from .helpers import dies_before_rename


def test_local_paths_resolve_absolute_and_bad_ones_are_config_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fs, root = open_fs("relative/out/")
    assert is_local(fs) and root == str(tmp_path / "relative" / "out")
    fs, root = open_fs(f"file://{tmp_path}/x")
    assert is_local(fs) and root == str(tmp_path / "x")
    for bad in ("nosuchproto://x/y", "", "   ", None):
        with pytest.raises(ConfigError):
            open_fs(bad)


def test_a_published_file_appears_whole(tmp_path):
    fs, root = open_fs(str(tmp_path))
    publish(fs, f"{root}/pages/a.bin", b"one")
    publish(fs, f"{root}/pages/a.bin", b"two")  # replaces, never appends or mixes
    assert (tmp_path / "pages" / "a.bin").read_bytes() == b"two"
    assert sorted(list_names(fs, f"{root}/pages")) == ["a.bin"]
    assert list_names(fs, f"{root}/missing") == []


def test_a_failed_rename_leaves_neither_file_nor_temp(tmp_path, monkeypatch):
    def boom(src, dst):
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_local_atomic(str(tmp_path / "f"), b"data")
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


def test_a_crash_before_the_rename_leaves_only_a_hidden_temp(tmp_path, monkeypatch):
    with dies_before_rename(monkeypatch):
        write_local_atomic(str(tmp_path / "f"), b"data")
    [left] = os.listdir(tmp_path)
    assert left.startswith(".f.") and left.endswith(".tmp")
    assert (tmp_path / left).read_bytes() == b"data"


def test_listing_a_file_as_a_directory_is_a_storage_error(tmp_path):
    (tmp_path / "plain").write_bytes(b"x")
    fs, root = open_fs(str(tmp_path))
    with pytest.raises(StorageError):
        list_names(fs, f"{root}/plain")


def test_a_name_created_once_has_one_owner_locally_and_in_memory(tmp_path):
    from fsspec.implementations.memory import MemoryFileSystem

    from crawler.output.fs import atomic_create, create_new

    for fs, path in ((open_fs(str(tmp_path))[0], str(tmp_path / "state" / "s" / "gen-00000001.json")),
                     (MemoryFileSystem(), f"/create-{os.getpid()}-{id(tmp_path)}/gen-00000001.json")):
        assert atomic_create(fs)
        assert create_new(fs, path, b"mine") is True  # the folder is made if need be
        assert create_new(fs, path, b"theirs") is False  # taken: the object is not replaced
        assert create_new(fs, path, b"mine") is True  # a retry of the same request is told apart
        assert fs.cat_file(path) == b"mine"


def test_a_store_without_conditional_writes_is_read_back(tmp_path):
    """A filesystem not known to create atomically: its create is read back."""
    from fsspec.implementations.dirfs import DirFileSystem

    from crawler.output.fs import atomic_create, create_new

    fs = DirFileSystem(path=str(tmp_path), fs=open_fs(str(tmp_path))[0])
    path = "gen-00000001.json"
    assert not atomic_create(fs)
    assert create_new(fs, path, b"mine") and not create_new(fs, path, b"theirs")
