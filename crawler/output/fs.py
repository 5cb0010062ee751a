"""Filesystems for the output: resolving ``OUT``, and writes that are never seen half-done.

``OUT`` is any fsspec URL: a local folder or ``s3://bucket/prefix`` (through s3fs). A file
is published atomically (docs/invariants.md #6: what is acked must be whole):

* locally, written under a hidden temporary name (:func:`~crawler.output.layout.temp_name`)
  in the same directory, fsynced, then renamed with ``os.replace`` (atomic on POSIX), and
  the directory fsynced so the new name itself survives a power loss;
* on object storage, as one single PUT, which is atomic by nature.

A name that must be taken once (a shard incarnation's generation: DESIGN invariant 15) is
created with :func:`create_new`, the one conditional create every caller uses: ``O_EXCL``
locally, ``If-None-Match: *`` on S3 (s3fs ``mode="create"``), and on any other store a
write read back, which is not atomic (:func:`atomic_create` says which).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import tempfile
from typing import Any, Callable, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from crawler.errors import ConfigError, PathError, StorageError
from crawler.output.layout import temp_name

T = TypeVar("T")

__all__ = [
    "OUTPUT_MARKS",
    "atomic_create",
    "check_new_file",
    "check_output_folder",
    "create_new",
    "retried",
    "ensure_dir",
    "fsync_path",
    "is_local",
    "list_names",
    "open_fs",
    "publish",
    "remove_quietly",
    "require_crawl_output",
    "write_local_atomic",
]

OUTPUT_MARKS = ("pages", "stats.json", "state")
"""What a crawl puts in OUT (``state/`` holds the lease from its first moment): a folder
with none of them is not crawl output."""


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` is the local disk (renames are atomic and fsync means something)."""
    return isinstance(fs, LocalFileSystem)


def open_fs(
    path: str, storage_options: dict[str, Any] | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """Resolve an output URL to ``(filesystem, protocol-less root path)``.

    Local paths (plain or ``file://``) are made absolute with ``~`` expanded; a trailing
    ``/`` is dropped. An unknown protocol or a missing filesystem package is the user's
    configuration to fix and raises :class:`ConfigError`.
    """
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"output path must be a non-empty string, got {path!r}")
    try:
        fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
    except (ValueError, ImportError, TypeError) as exc:
        raise ConfigError(
            f"cannot open output path {path!r}: {exc} "
            "(use a local folder or a URL such as s3://bucket/prefix, and check storage_options)"
        ) from exc
    if is_local(fs):
        root = os.path.abspath(root)
    elif len(root) > 1:
        root = root.rstrip("/")
    return fs, root


def fsync_path(path: str) -> None:
    """fsync a file or a directory by path (a directory holds renames: fsync it so a new
    name survives a power loss, not only the file's bytes)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_local_atomic(path: str, data: bytes, *, fsync: bool = True, fsync_parent: bool = True) -> None:
    """Write ``data`` to local ``path`` via a hidden temp file in the same dir + os.replace."""
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, temp_name(name))
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX: readers see the old name or the whole file
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # never created, or already renamed
            os.unlink(tmp)
        raise
    if fsync and fsync_parent:
        fsync_path(directory)


def publish(fs: fsspec.AbstractFileSystem, path: str, data: bytes, *, fsync: bool = True) -> None:
    """Make ``data`` appear at ``path`` whole or not at all (rename locally, one PUT remotely).

    Remotely, a retry after an unknown outcome rewrites the same name, which callers make
    harmless (the same or a superset of the rows).
    """
    if is_local(fs):
        write_local_atomic(path, data, fsync=fsync, fsync_parent=True)
    else:
        fs.pipe_file(path, data)


def atomic_create(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether :func:`create_new` on ``fs`` is atomic: two racing creators cannot both win.

    True for the local disk (``O_EXCL``), S3 through s3fs (``If-None-Match: *``: AWS S3
    since 2024-08, and moto; a store that ignores the header is an S3 look-alike this
    cannot detect) and fsspec's in-memory store (tests). Any other fsspec store gets
    fsspec's generic ``mode="create"``: an existence check, then a write."""
    if is_local(fs) or isinstance(fs, MemoryFileSystem) or getattr(fs, "create_is_atomic", False):
        return True
    try:
        from s3fs import S3FileSystem
    except ImportError:  # s3fs is an optional dependency of fsspec
        return False
    return isinstance(fs, S3FileSystem)


def _read_or_none(fs: fsspec.AbstractFileSystem, path: str) -> bytes | None:
    try:
        if is_local(fs):
            with open(path, "rb") as f:
                return f.read()
        data: bytes = fs.cat_file(path)  # fsspec has no types
        return data
    except FileNotFoundError:
        return None


def create_new(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless something is there already: True if ``path``
    now holds ``data`` because of this call, False if another writer took it first.

    ``data`` must be unique to the caller (it holds a random token): a reply lost after
    the object was created, or a store's own retry of the request, is then told apart
    from a rival's object by reading it back. Locally the file is created with
    ``O_EXCL``, fsynced, and its folder fsynced (a crash mid-write leaves a file that is
    not ``data``: the name is taken, by nobody, which is safe). Locally the bytes go to a
    hidden temporary name first and are linked to ``path`` (a link fails if the name
    exists): a reader never sees a half-written claim. Elsewhere it is one PUT
    with ``mode="create"``; on a store where that is not atomic (:func:`atomic_create`)
    the object is also read back after the write, so a rival that overwrote it first is
    seen -- one that overwrites it after that read is not. Other failures raise
    StorageError."""
    try:
        if is_local(fs):
            directory, name = os.path.split(path)
            os.makedirs(directory, exist_ok=True)
            tmp = os.path.join(directory, temp_name(name))
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.link(tmp, path)  # FileExistsError: the name is someone's already
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            fsync_path(directory)
            return True
        fs.pipe_file(path, data, mode="create")
    except FileExistsError:
        return _read_or_none(fs, path) == data
    except OSError as exc:  # a lost reply, S3's 409 for a concurrent conditional write: what is there decides
        try:
            there = _read_or_none(fs, path)
        except Exception as again:  # noqa: BLE001 - botocore/aiohttp/OS errors alike: reported in the StorageError
            raise StorageError(f"cannot create {path!r}: {exc}; reading it back: {again}") from exc
        if there is None:
            raise StorageError(f"cannot create {path!r}: {exc}") from exc
        return there == data
    except Exception as exc:  # botocore/aiohttp errors that are not OSError
        raise StorageError(f"cannot create {path!r}: {exc}") from exc
    return atomic_create(fs) or _read_or_none(fs, path) == data


def retried(call: Callable[[], T], what: str, attempts: int = 4) -> T:
    """``call()``, again after a transient failure of the store (an OSError that is not
    "missing", "exists" or "forbidden"), up to ``attempts`` times; then StorageError naming
    ``what``. For small whole-object writes a run cannot do without (``stats.json``,
    ``crawl.json``): s3fs retries each request itself, this covers what outlasts that,
    so a passing fault of the store is not a run that ends with a traceback."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except (FileNotFoundError, FileExistsError, PermissionError):
            raise
        except OSError as exc:
            if attempt == attempts:
                raise StorageError(f"{what} failed {attempts} times: {exc}") from exc
    raise AssertionError("unreachable")


def ensure_dir(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """Create a local directory (object stores have no directories: nothing to do)."""
    if is_local(fs):
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create {path!r}: {exc}") from exc


def list_names(fs: fsspec.AbstractFileSystem, directory: str) -> list[str]:
    """Basenames in ``directory``; [] if it does not exist. Never a cached listing: other
    writers add files all the time. Other failures raise StorageError."""
    try:
        if is_local(fs):
            return os.listdir(directory)
        fs.invalidate_cache(directory)
        return [posixpath.basename(p) for p in fs.ls(directory, detail=False)]
    except FileNotFoundError:
        return []
    except Exception as exc:  # botocore/aiohttp/OS errors alike
        raise StorageError(f"cannot list {directory!r}: {exc}") from exc


def remove_quietly(path: str) -> None:
    """Remove a local file that may already be gone."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# -- paths the user gives (checked before anything is created) ------------------------------


def _file_above(path: str) -> str | None:
    """The nearest existing ancestor of local ``path`` if it is not a folder, else None."""
    parent = os.path.dirname(path)
    while parent and not os.path.exists(parent):
        if parent == os.path.dirname(parent):
            return None
        parent = os.path.dirname(parent)
    return parent if parent and not os.path.isdir(parent) else None


def require_crawl_output(out: str, storage_options: dict[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """``open_fs(out)`` if ``out`` holds crawl output (one of :data:`OUTPUT_MARKS`); else
    PathError saying what is there instead. Reads only: a typo creates nothing."""
    fs, root = open_fs(out, storage_options)
    if is_local(fs):
        if os.path.exists(root) and not os.path.isdir(root):
            raise PathError(f"{out} is a file, not a folder of crawl output")
        if not os.path.isdir(root):
            raise PathError(f"{out} holds no crawl output: there is no such folder")
        found = any(os.path.exists(os.path.join(root, m)) for m in OUTPUT_MARKS)
    else:
        try:
            found = any(fs.exists(f"{root}/{m}") for m in OUTPUT_MARKS)
        except Exception as exc:  # botocore/aiohttp errors alike: unreachable, no access
            raise StorageError(f"cannot read {out}: {exc}") from exc
    if not found:
        raise PathError(f"{out} holds no crawl output (none of {', '.join(OUTPUT_MARKS)} in it)")
    return fs, root


def _nearest_folder(path: str) -> str:
    """``path`` if it exists, else its nearest existing ancestor."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def check_output_folder(path: str, storage_options: dict[str, Any] | None = None) -> None:
    """Refuse a local folder to write into that is a file, lies under one, or cannot be
    written (no permission, a read-only filesystem, a virtual one such as /proc). The
    folder and its parents are created later, by the run; writing is tried here by making
    a temporary folder in the nearest one that exists, removed at once, so a refused path
    leaves nothing behind. Object stores have no folders."""
    fs, root = open_fs(path, storage_options)
    if not is_local(fs):
        return
    if os.path.exists(root) and not os.path.isdir(root):
        raise PathError(f"{path} is a file, not a folder")
    above = _file_above(root)
    if above is not None:
        raise PathError(f"{path}: {above} is a file, not a folder")
    base = _nearest_folder(root)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".raycrawl-write-check-", dir=base))
    except OSError as exc:  # the OS's words (EROFS, EACCES, ENOENT under /proc), one line
        raise PathError(f"{path}: cannot write there ({exc.strerror or exc} in {base}); choose another --out") from exc


def check_new_file(path: str, storage_options: dict[str, Any] | None = None) -> None:
    """Refuse a local file to write that cannot be: a folder by that name, or a folder to
    put it in that does not exist (it is not created: a typo in it would be)."""
    fs, root = open_fs(path, storage_options)
    if not is_local(fs):
        return
    if os.path.isdir(root):
        raise PathError(f"{path} is a folder; give a file name")
    parent = os.path.dirname(root)
    if not os.path.isdir(parent):
        what = "is a file, not a folder" if os.path.exists(parent) else "does not exist"
        raise PathError(f"{path}: the folder {parent} {what}")
