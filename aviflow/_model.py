"""Strict pydantic models and their error messages, shared by the spec and the hub config.

A strict model refuses unknown keys (naming the closest valid one), never coerces types, and
accepts only text that every store we write to can hold: UTF-8 encodable (no lone
surrogates), no NUL bytes. Error messages never echo large inputs.

>>> class Point(StrictModel):
...     x: int
...     y: int
>>> explain(_errors(Point, {"x": 1, "y": "2", "yy": 3}), Point)
["y: Input should be a valid integer (got str '2')", "yy: unknown key; did you mean 'y'?"]
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

MAX_DEPTH = 32
_SHOWN = 60


class StrictModel(BaseModel):
    """Frozen, ``extra="forbid"``, strict types; fields are read and written by alias."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True, frozen=True)


def short(value: Any, limit: int = _SHOWN) -> str:
    """``repr(value)``, cut to about ``limit`` characters."""
    try:
        text = repr(value)
    except Exception:  # a repr that fails must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored everywhere (YAML, JSON, SQLite, PostgreSQL), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"has a character that is not valid Unicode text at position {exc.start} (a lone surrogate)"
    if "\x00" in text:
        return "has a NUL byte"
    return None


def storable_problems(data: Any, where: str = "") -> list[str]:
    """One line per string (key or value) in ``data`` that is not storable text, and for
    nesting deeper than :data:`MAX_DEPTH`."""
    return list(_walk(data, where, 0))


def _walk(data: Any, where: str, depth: int) -> Iterator[str]:
    if depth > MAX_DEPTH:
        yield f"{where or '(top level)'}: nested more than {MAX_DEPTH} levels deep"
        return
    if isinstance(data, str):
        problem = text_problem(data)
        if problem:
            yield f"{where or '(top level)'}: {problem}"
    elif isinstance(data, dict):
        for key, value in data.items():
            name = key if isinstance(key, str) else str(key)
            problem = text_problem(name) if isinstance(key, str) else None
            child = f"{where}.{_printable(name)}" if where else _printable(name)
            if problem:
                yield f"{child}: the key {problem}"
                continue
            yield from _walk(value, child, depth + 1)
    elif isinstance(data, list | tuple):
        for i, value in enumerate(data):
            yield from _walk(value, f"{where}[{i}]" if where else f"[{i}]", depth + 1)


def _printable(name: str) -> str:
    return name.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")[:_SHOWN]


def keys_of(model: type[BaseModel]) -> list[str]:
    """The keys a model accepts (aliases where set)."""
    return [f.alias or n for n, f in model.model_fields.items()]


def inner_model(annotation: Any) -> type[BaseModel] | None:
    """The model inside ``annotation`` (``Model``, ``Model | None``, ``list[Model]``...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = inner_model(arg)
        if found is not None:
            return found
    return None


def model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model that holds the key at ``loc`` (list indexes and dict keys skipped)."""
    model: type[BaseModel] | None = root
    keyed = False  # the part is a key of a mapping of models (``dict[str, Model]``)
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int) or keyed:
            keyed = False
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return None
        model = inner_model(field.annotation)
        keyed = getattr(field.annotation, "__origin__", None) is dict
    return model


def explain(exc: ValidationError, root: type[BaseModel]) -> list[str]:
    """One line per problem, each naming the key; unknown keys get a "did you mean"."""
    problems: list[str] = []
    for err in exc.errors(include_url=False):
        # pydantic adds tagged-union and function names to locations: drop them
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p[:1].isupper()))
        where = ".".join(_printable(str(p)) for p in loc) or "(top level)"
        kind = err["type"]
        if kind == "extra_forbidden":
            parent = model_at(root, loc[:-1])
            valid = keys_of(parent) if parent else []
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.5)
            hint = (
                f"; did you mean '{close[0]}'?"
                if close
                else (f"; valid keys: {', '.join(valid)}" if valid else "")
            )
            problems.append(f"{where}: unknown key{hint}")
        elif kind == "missing":
            problems.append(f"{where}: required key is missing")
        elif kind == "literal_error":
            expected = (err.get("ctx") or {}).get("expected", "")
            problems.append(f"{where}: must be {expected}, got {short(err.get('input'))}")
        else:
            msg = str(err["msg"]).removeprefix("Value error, ")
            got = err.get("input")
            if kind.endswith("_type"):
                shown = f" (got {type(got).__name__} {short(got)})"
            elif kind == "value_error" or isinstance(got, dict | list) or got is None:
                shown = ""
            else:
                shown = f" (got {short(got)})"
            problems.append(f"{where}: {msg}{shown}")
    return problems


def _errors(model: type[BaseModel], data: Any) -> ValidationError:
    """The ValidationError ``data`` raises (for the doctest)."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        return exc
    raise AssertionError("valid")
