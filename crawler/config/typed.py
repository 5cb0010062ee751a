"""Typed settings from YAML-shaped data: the generic half of configuration loading.

:func:`build` turns a mapping into a (frozen) dataclass, checking every value against the
field's annotation (``Literal``, unions, tuples, mappings, nested dataclasses) so a wrong
type or an unknown key fails with a :class:`~crawler.errors.ConfigError` that names the
key. Value checks that types cannot express come in through a ``check(obj, prefix)``
hook, which :mod:`crawler.config.settings` supplies for the crawl's own sections.
``--set section.key=value`` overrides are parsed and applied here too.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union

import yaml

from crawler.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: A value check: the built object (a section, or the whole config) and its key prefix.
Check = Callable[[Any, str], None]

T = TypeVar("T", bound="DataclassInstance")


def _no_check(obj: Any, prefix: str) -> None:
    """The default ``check``: types only."""


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if origin in (tuple, list):
        return "list of " + type_name(typing.get_args(tp)[0])
    if origin in (dict, Mapping, typing.get_origin(Mapping[str, str])):
        return "mapping"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def coerce(value: Any, tp: Any, key: str, check: Check = _no_check) -> Any:
    """Check ``value`` against the annotation ``tp``; return the typed value."""
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if value is None:
            return tp()
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping of settings, got {type(value).__name__}")
        return build(tp, value, key + ".", check)
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        raise ConfigError(f"{key}: expected one of {type_name(tp)}, got {value!r}")
    if origin in (Union, types.UnionType):
        errors = []
        for arg in typing.get_args(tp):
            try:
                return coerce(value, arg, key, check)
            except ConfigError as exc:
                errors.append(exc)
        raise ConfigError(f"{key}: expected {type_name(tp)}, got {value!r}")
    if tp is type(None):
        if value is None:
            return None
        raise ConfigError(f"{key}: expected null")
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__}")
        (item_tp, *_rest) = typing.get_args(tp)
        return tuple(coerce(v, item_tp, f"{key}[{i}]", check) for i, v in enumerate(value))
    if origin is not None and issubclass(origin, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        kt, vt = typing.get_args(tp)
        return {str(coerce(k, kt, key, check)): coerce(v, vt, f"{key}.{k}", check) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an int too large for a float
                number = math.inf
            # YAML's .nan / .inf parse as floats; no setting means anything with them
            # (a NaN interval would silently disable politeness comparisons).
            if not math.isfinite(number):
                raise ConfigError(f"{key}: expected a finite number, got {value!r}")
            return number
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    raise ConfigError(f"{key}: unsupported setting type {type_name(tp)}")  # pragma: no cover


def build(cls: type[T], data: Mapping[str, Any], prefix: str = "", check: Check = _no_check) -> T:
    """Build dataclass ``cls`` from ``data``: unknown keys, wrong types and (via ``check``)
    impossible values raise :class:`ConfigError` naming the key."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(map(str, data)) - names)
    if unknown:
        raise ConfigError(
            f"unknown setting {prefix}{unknown[0]} (known keys here: {', '.join(sorted(names))})"
        )
    kwargs = {name: coerce(data[name], hints[name], prefix + name, check) for name in names if name in data}
    obj = cls(**kwargs)
    check(obj, prefix)
    return obj


def positive(obj: Any, prefix: str, *names: str, allow_zero: bool = False) -> None:
    """Raise unless each named (non-null) field is > 0 (or >= 0 with ``allow_zero``)."""
    for n in names:
        v = getattr(obj, n)
        if v is None:
            continue
        if v < 0 or (v == 0 and not allow_zero):
            raise ConfigError(f"{prefix}{n}: must be {'>= 0' if allow_zero else '> 0'}, got {v!r}")


def parse_override(item: str) -> tuple[list[str], Any]:
    """Split ``section.key=value`` into a key path and a YAML-parsed value."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected section.key=value")
    key, _, raw = item.partition("=")
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"--set {item!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {item!r}: value is not valid YAML: {' '.join(str(exc).split())}") from exc
    return path, value


def _copy_tree(value: Any) -> Any:
    """Copy the dict/list structure (values as they are): overrides mutate the copy.

    Not a JSON round trip: YAML values such as dates are not JSON, and they must reach
    the type checks (which name the key) rather than fail here with a TypeError.
    """
    if isinstance(value, Mapping):
        return {k: _copy_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy_tree(v) for v in value]
    return value


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Return ``data`` with each ``section.key=value`` override applied (a deep copy)."""
    out = _copy_tree(data) if data else {}
    for item in overrides:
        path, value = parse_override(item)
        node = out
        for p in path[:-1]:
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {item!r}: {p} is not a section")
            node = nxt
        node[path[-1]] = value
    return out


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON/YAML-ready dict of a config (tuples become lists)."""

    def conv(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (tuple, list)):
            return [conv(x) for x in v]
        if isinstance(v, Mapping):
            return {str(k): conv(x) for k, x in v.items()}
        return v

    out: dict[str, Any] = conv(cfg)
    return out
