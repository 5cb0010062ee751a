"""A simulated object store behind an fsspec filesystem (``simfs://``), with faults.

The crawler writes its output and its durable state through fsspec (crawler.output.fs):
with an ``s3://`` output that is s3fs. In the simulation it is :class:`SimFileSystem`,
an object store in memory with S3's shape -- flat keys, one atomic PUT per object,
``If-None-Match: *`` creates (``mode="create"``), folders implied by prefixes -- whose
misbehaviour the nemesis turns on and off (:class:`StoreFaults`):

* a PUT that fails before it lands, or lands and still reports a failure (the
  client cannot tell which: an unknown outcome, retried);
* a GET that fails;
* a LIST that misses objects written in the last seconds (a store that lists late), or
  one object in the middle (a listing that lost an object), or comes back shuffled.

Every decision is drawn from the store's own ``random.Random`` in the order the calls
arrive, so a run stays a function of its seed. Latency is not modelled here: the calls
are synchronous, and a process pays for its blocking I/O in ``run_blocking``
(crawler.testing.sim.nodes).
"""

from __future__ import annotations

import io
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from fsspec import AbstractFileSystem, register_implementation

PROTOCOL = "simfs"

#: Every store of every world in this process, by name (fsspec builds filesystems by URL).
_STORES: dict[str, "SimStore"] = {}


class StoreUnavailable(OSError):
    """A request the simulated store failed (as s3fs reports a 5xx after its retries)."""


@dataclass(frozen=True)
class StoreFaults:
    """How the store misbehaves now (all off by default)."""

    put_fail: float = 0.0  # a PUT fails before it lands
    put_unknown: float = 0.0  # a PUT lands, then reports a failure
    get_fail: float = 0.0
    list_lag_s: float = 0.0  # objects younger than this are missing from listings
    list_drop: float = 0.0  # chance that a listing misses one object of the middle
    list_shuffle: bool = False
    delete_fail: float = 0.0


@dataclass
class _Object:
    data: bytes
    put_at: float


@dataclass
class SimStore:
    """The objects of one simulated world, and what is wrong with the store now."""

    name: str
    now: Callable[[], float]
    rng: random.Random
    faults: StoreFaults = StoreFaults()
    objects: dict[str, _Object] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)  # requests and injected failures by kind
    puts: list[tuple[float, str]] = field(default_factory=list)  # every PUT that landed: (time, key)

    def __post_init__(self) -> None:
        _STORES[self.name] = self

    def close(self) -> None:
        _STORES.pop(self.name, None)

    def url(self, path: str) -> str:
        return f"{PROTOCOL}://{self.name}/{path.lstrip('/')}"

    def _fail(self, chance: float, kind: str) -> bool:
        if chance > 0 and self.rng.random() < chance:
            self.counts[f"injected_{kind}"] += 1
            return True
        return False

    def put(self, key: str, data: bytes, *, create: bool = False) -> None:
        self.counts["put"] += 1
        if self._fail(self.faults.put_fail, "put_fail"):
            raise StoreUnavailable(f"simulated PUT failure: {key}")
        if create and key in self.objects:
            raise FileExistsError(key)  # 412 Precondition Failed on If-None-Match: *
        self.objects[key] = _Object(bytes(data), self.now())
        self.puts.append((self.now(), key))
        if self._fail(self.faults.put_unknown, "put_unknown"):
            raise StoreUnavailable(f"simulated PUT with an unknown outcome (it landed): {key}")

    def get(self, key: str) -> bytes:
        self.counts["get"] += 1
        if self._fail(self.faults.get_fail, "get_fail"):
            raise StoreUnavailable(f"simulated GET failure: {key}")
        obj = self.objects.get(key)
        if obj is None:
            raise FileNotFoundError(key)
        return obj.data

    def delete(self, key: str) -> None:
        self.counts["delete"] += 1
        if self._fail(self.faults.delete_fail, "delete_fail"):
            raise StoreUnavailable(f"simulated DELETE failure: {key}")
        self.objects.pop(key, None)

    def list(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` as this listing sees them (faults applied)."""
        self.counts["list"] += 1
        keys = sorted(k for k in self.objects if k.startswith(prefix))
        f = self.faults
        if f.list_lag_s > 0:
            cutoff = self.now() - f.list_lag_s
            late = [k for k in keys if self.objects[k].put_at > cutoff]
            if late:
                self.counts["injected_list_lag"] += len(late)
                keys = [k for k in keys if self.objects[k].put_at <= cutoff]
        if len(keys) >= 3 and self._fail(f.list_drop, "list_drop"):
            del keys[self.rng.randrange(1, len(keys) - 1)]
        if f.list_shuffle and len(keys) > 1:
            self.counts["injected_list_shuffle"] += 1
            self.rng.shuffle(keys)
        return keys


class _WriteBuffer(io.BytesIO):
    def __init__(self, store: SimStore, key: str, create: bool) -> None:
        super().__init__()
        self._store, self._key, self._create = store, key, create

    def close(self) -> None:
        if not self.closed:
            data = self.getvalue()
            super().close()
            self._store.put(self._key, data, create=self._create)


class SimFileSystem(AbstractFileSystem):  # type: ignore[misc]  # fsspec is untyped (pyproject.toml): its base class is Any
    """fsspec's view of a :class:`SimStore`: ``simfs://<store>/<key>``."""

    protocol = PROTOCOL
    root_marker = ""
    cachable = False
    create_is_atomic = True  # mode="create" checks and writes in one step (crawler.output.fs.atomic_create)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith(PROTOCOL + "://"):
            path = path[len(PROTOCOL) + 3:]
        return path.rstrip("/")

    @staticmethod
    def _split(path: str) -> tuple[SimStore, str]:
        name, _, key = path.partition("/")
        store = _STORES.get(name)
        if store is None:
            raise FileNotFoundError(f"no simulated store {name!r}")
        return store, key

    def _full(self, store: SimStore, key: str) -> str:
        return f"{store.name}/{key}"

    # -- reads ---------------------------------------------------------------------

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        store, key = self._split(path)
        prefix = key + "/" if key else ""
        names: dict[str, dict[str, Any]] = {}
        for k in store.list(prefix):
            rest = k[len(prefix):]
            child, sep, _ = rest.partition("/")
            full = self._full(store, prefix + child)
            if sep:
                names.setdefault(full, {"name": full, "size": 0, "type": "directory"})
            else:
                names[full] = {"name": full, "size": len(store.objects[k].data) if k in store.objects else 0,
                               "type": "file"}
        if not names:
            if key in store.objects:
                return [self.info(path)] if detail else [path]
            raise FileNotFoundError(path)
        entries = list(names.values())
        return entries if detail else [e["name"] for e in entries]

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        store, key = self._split(path)
        obj = store.objects.get(key)
        if obj is not None:
            return {"name": path, "size": len(obj.data), "type": "file"}
        if any(k.startswith(key + "/") for k in store.objects):
            return {"name": path, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        store, key = self._split(self._strip_protocol(path))
        return store.get(key)[start:end]

    def get_file(self, rpath: str, lpath: str, **kwargs: Any) -> None:
        data = self.cat_file(rpath)
        with open(lpath, "wb") as f:
            f.write(data)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        store, key = self._split(self._strip_protocol(path))
        if "r" in mode:
            return io.BytesIO(store.get(key))
        return _WriteBuffer(store, key, create="x" in mode)

    # -- writes --------------------------------------------------------------------

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        store, key = self._split(self._strip_protocol(path))
        store.put(key, value, create=mode == "create")

    def put_file(self, lpath: str, rpath: str, callback: Any = None, mode: str = "overwrite", **kwargs: Any) -> None:
        with open(lpath, "rb") as f:
            data = f.read()
        self.pipe_file(rpath, data, mode=mode)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        """A server-side copy (S3 CopyObject): one GET and one PUT as far as faults go."""
        src, key1 = self._split(self._strip_protocol(path1))
        dst, key2 = self._split(self._strip_protocol(path2))
        dst.put(key2, src.get(key1))

    def rm_file(self, path: str) -> None:
        store, key = self._split(self._strip_protocol(path))
        store.delete(key)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        paths = path if isinstance(path, list) else [path]
        for p in paths:
            p = self._strip_protocol(p)
            store, key = self._split(p)
            if recursive:
                for k in [k for k in store.objects if k == key or k.startswith(key + "/")]:
                    store.delete(k)
            else:
                store.delete(key)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Object stores have no folders."""

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Object stores have no folders."""

    def invalidate_cache(self, path: str | None = None) -> None:
        """Nothing is cached: every listing asks the store."""


register_implementation(PROTOCOL, SimFileSystem, clobber=True)
