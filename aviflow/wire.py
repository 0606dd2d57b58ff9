"""One codec for the typed records: each record's wire form derived from its dataclass.

A record is a frozen dataclass registered with :func:`record`; each field's wire rules sit in
its metadata (:func:`meta`), and everything else follows from its type and default:

- the key is the field's name in camelCase (``exit_code`` -> ``exitCode``; ``key=`` to name
  it otherwise, ``aliases=`` for keys older writers used);
- ``omit``: ``"never"`` (always written, null included), ``"none"`` (left out when None) or
  ``"empty"`` (left out when None, empty text, an empty collection or False; numbers stay);
- enums travel by value, nested records as objects, tuples as lists;
- reading, a field is required when the dataclass has no default (``missing=`` gives the
  value for an absent or empty key instead), optional types read null as None, and a field
  with a default takes it for an absent or empty key, as ``int(d.get("attempt") or 0)``
  would. Keys the reader does not know are ignored (a newer writer may add some).

:func:`from_wire` converts as the records always did (``int()``, ``float()``, ``str()``);
``strict=True`` enforces the types instead (a whole number, not ``"3"`` nor ``True``; a
finite number; text), as the run store does for what a job wrote. A value that cannot be
read raises :class:`WireError` naming the record and key; a record registered with
``invalid="none"`` reads as None instead (a reader shows no estimate rather than a wrong
one). ``check=`` adds a test of the raw value, ``clip=`` bounds text (and ``item_clip=`` the
texts of a list). The encoders and decoders are compiled once per record (plain Python
source, like :mod:`dataclasses`' own ``__init__``), so they cost what hand-written ones do.

The same definitions give the OpenAPI schemas, the CRD's status schema and the TypeScript
interfaces (:mod:`aviflow.wire_gen`, ``make generate``).

>>> from aviflow.records import FailureInfo
>>> to_wire(FailureInfo(rank=1, exit_code=3))
{'rank': 1, 'attempt': 0, 'exitCode': 3}
>>> from_wire(FailureInfo, {"rank": "1", "exit_code": 3}).exit_code
3
>>> from_wire(FailureInfo, {"rank": "one"})
Traceback (most recent call last):
...
aviflow.wire.WireError: FailureInfo.rank: invalid literal for int() with base 10: 'one'
>>> from_wire(FailureInfo, {"rank": "1"}, strict=True)
Traceback (most recent call last):
...
aviflow.wire.WireError: FailureInfo.rank: expected a whole number, got '1'
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, TypeVar

T = TypeVar("T")
Omit = Literal["never", "none", "empty"]
_META = "aviflow.wire"
_NO: Any = dataclasses.MISSING


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


_ABSENT: Any = _Absent()  # no ``missing=`` given


class WireError(ValueError):
    """A record that cannot be read from its wire form: ``Record.key: why``."""


@dataclass(frozen=True)
class FieldRules:
    """A field's wire rules (:func:`meta`)."""

    key: str | None = None
    aliases: tuple[str, ...] = ()
    omit: Omit = "never"
    missing: Any = _ABSENT
    required: bool = False
    check: Callable[[Any], bool] | None = None
    clip: int | None = None
    item_clip: int | None = None
    doc: str | None = None
    minimum: int | None = None
    schema: Mapping[str, Any] | None = None
    wire: bool = True


def meta(
    *,
    key: str | None = None,
    aliases: Sequence[str] = (),
    omit: Omit = "never",
    missing: Any = _ABSENT,
    required: bool = False,
    check: Callable[[Any], bool] | None = None,
    clip: int | None = None,
    item_clip: int | None = None,
    doc: str | None = None,
    minimum: int | None = None,
    schema: Mapping[str, Any] | None = None,
    wire: bool = True,
) -> dict[str, Any]:
    """A field's wire rules, as ``dataclasses.field(metadata=meta(...))``: see the module doc
    (``doc``, ``minimum`` and ``schema`` are for the generated schemas; ``wire=False``: not on
    the wire, read as ``missing``; ``required``: a key the reader needs despite a default)."""
    rules = FieldRules(
        key=key,
        aliases=tuple(aliases),
        omit=omit,
        missing=missing,
        required=required,
        check=check,
        clip=clip,
        item_clip=item_clip,
        doc=doc,
        minimum=minimum,
        schema=schema,
        wire=wire,
    )
    return {_META: rules}


@dataclass(frozen=True)
class Computed:
    """A key written from the record but never read back (``gpus`` from nodes x GPUs):
    ``get`` computes it, ``kind`` is its type for the schemas."""

    get: Callable[[Any], Any]
    kind: type
    omit: Omit = "never"
    doc: str | None = None


@dataclass(frozen=True)
class RecordRules:
    name: str
    doc: str | None
    order: tuple[str, ...]
    computed: Mapping[str, Computed]
    invalid: Literal["raise", "none"]
    keys: Literal["camel", "snake"]


_RULES: dict[type, RecordRules] = {}


def record(
    *,
    name: str | None = None,
    doc: str | None = None,
    order: Sequence[str] = (),
    computed: Mapping[str, Computed] | None = None,
    invalid: Literal["raise", "none"] = "raise",
    keys: Literal["camel", "snake"] = "camel",
) -> Callable[[type[T]], type[T]]:
    """Register a dataclass as a record. ``name``: its schemas' name (the class's);
    ``order``: the keys' order on the wire by field name (the rest follow in definition
    order); ``computed``: keys written from the record (:class:`Computed`); ``invalid``:
    ``"none"`` reads a malformed record as None; ``keys``: ``"snake"`` keeps the fields'
    names as keys."""

    def register(cls: type[T]) -> type[T]:
        _RULES[cls] = RecordRules(
            name or cls.__name__, doc, tuple(order), dict(computed or {}), invalid, keys
        )
        return cls

    return register


def records() -> list[type]:
    """The registered records (those of the modules imported so far), in registration order."""
    return list(_RULES)


def rules(cls: type) -> RecordRules:
    return _RULES[cls]


def camel(name: str) -> str:
    """A field's name as a key.

    >>> camel("gpus_per_node")
    'gpusPerNode'
    """
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# -- the plan: each field's kind, read once from the type hints --

Kind = Literal[
    "int", "float", "str", "bool", "enum", "record", "records", "strs", "object", "strmap"
]


@dataclass(frozen=True)
class WireField:
    """One key of a record's wire form, as the codec and the generators see it."""

    name: str  # the attribute
    key: str
    kind: Kind
    nullable: bool  # the type allows None
    target: type | None  # the enum or record class
    rules: FieldRules
    mode: Literal["required", "optional", "default"]
    default: Any  # for mode "default": the value of an absent or empty key
    computed: Computed | None = None

    @property
    def omit(self) -> Omit:
        return self.computed.omit if self.computed is not None else self.rules.omit

    @property
    def doc(self) -> str | None:
        return self.computed.doc if self.computed is not None else self.rules.doc


def _kind(tp: Any) -> tuple[Kind, bool, type | None]:
    nullable = False
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        nullable, tp = True, next(a for a in typing.get_args(tp) if a is not type(None))
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        return "bool", nullable, None
    if tp in (int, float, str):
        return typing.cast(Kind, tp.__name__), nullable, None
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "enum", nullable, tp
    if isinstance(tp, type) and tp in _RULES:
        return "record", nullable, tp
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if args[0] is str:
            return "strs", nullable, None
        if args[0] in _RULES:
            return "records", nullable, args[0]
    if origin in (dict, Mapping) and args == (str, str):
        return "strmap", nullable, None
    if origin in (dict, Mapping) and args[0] is str:
        return "object", nullable, None
    raise TypeError(f"no wire form for the type {tp!r}")


_PLANS: dict[type, list[WireField]] = {}


def plan(cls: type) -> list[WireField]:
    """The record's keys in wire order (computed ones included; fields off the wire last)."""
    found = _PLANS.get(cls)
    if found is not None:
        return found
    rec = _RULES[cls]
    hints = typing.get_type_hints(cls)
    out: dict[str, WireField] = {}
    for f in dataclasses.fields(cls):
        rules = f.metadata.get(_META, FieldRules())
        kind, nullable, target = _kind(hints[f.name])
        factory: Any = f.default_factory
        default = factory() if factory is not _NO else f.default
        mode: Literal["required", "optional", "default"]
        if rules.missing is not _ABSENT:
            mode, default = "default", rules.missing
        elif rules.required or (default is _NO and not nullable):
            mode, default = "required", None
        elif nullable:
            mode, default = "optional", None
        else:
            mode = "default"
        key = rules.key or (f.name if rec.keys == "snake" else camel(f.name))
        out[f.name] = WireField(f.name, key, kind, nullable, target, rules, mode, default)
    for key, comp in rec.computed.items():
        kind, nullable, _ = _kind(comp.kind)
        out[key] = WireField(key, key, kind, nullable, None, FieldRules(), "optional", None, comp)
    names = [*rec.order, *(n for n in out if n not in rec.order)]
    found = sorted((out[n] for n in names), key=lambda w: not w.rules.wire)
    _PLANS[cls] = found
    return found


# -- compiled encoders and decoders --


def _whole(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise TypeError(f"expected a whole number, got {_short(v)}")


def _number(v: Any) -> float:
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    raise TypeError(f"expected a finite number, got {_short(v)}")


def _text(v: Any) -> str:
    if isinstance(v, str):
        return v
    raise TypeError(f"expected text, got {_short(v)}")


def _object(v: Any) -> dict[str, Any]:
    if isinstance(v, Mapping):
        return dict(v)
    raise TypeError(f"expected an object, got {_short(v)}")


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


_CONVERT = {
    False: {"int": "int", "float": "float", "str": "str", "object": "dict"},
    True: {"int": "_whole", "float": "_number", "str": "_text", "object": "_object"},
}


@dataclass(frozen=True)
class _Codec:
    encode: Callable[[Any], dict[str, Any]]
    decode: Callable[[Any], Any]
    decode_strict: Callable[[Any], Any]


_CODECS: dict[type, _Codec] = {}


def _codec(cls: type) -> _Codec:
    found = _CODECS.get(cls)
    if found is None:
        if cls not in _RULES:
            raise TypeError(f"{cls.__name__} is not a wire record (aviflow.wire.record)")
        found = _CODECS[cls] = _compile(cls)
    return found


def _enc_value(w: WireField, v: str, ns: dict[str, Any]) -> str:
    if w.kind == "enum":
        expr = f"{v}.value"
    elif w.kind == "record":
        ns[f"_enc_{w.name}"] = _codec(w.target).encode  # type: ignore[arg-type]
        expr = f"_enc_{w.name}({v})"
    elif w.kind == "records":
        ns[f"_enc_{w.name}"] = _codec(w.target).encode  # type: ignore[arg-type]
        expr = f"[_enc_{w.name}(x) for x in {v}]"
    elif w.kind == "strs":
        expr = f"list({v})"
    elif w.kind == "strmap":
        expr = f"dict({v})"
    else:
        return v
    return f"(None if {v} is None else {expr})" if w.nullable else expr


def _compile_encoder(cls: type, ns: dict[str, Any]) -> Callable[[Any], dict[str, Any]]:
    literal: list[str] = []
    lines: list[str] = []
    for w in plan(cls):
        if not w.rules.wire:
            continue
        if w.computed is not None:
            ns[f"_get_{w.name}"] = w.computed.get
            get = f"_get_{w.name}(o)"
        else:
            get = f"o.{w.name}"
        if w.omit == "never" and not lines:
            literal.append(f"{w.key!r}: {_enc_value(w, get, ns)}")
            continue
        if w.omit == "never":
            lines.append(f"    out[{w.key!r}] = {_enc_value(w, get, ns)}")
            continue
        lines.append(f"    v = {get}")
        if w.omit == "none" or w.kind in ("int", "float", "enum", "record"):
            lines.append("    if v is not None:")
        else:  # "empty": text, collections, flags
            lines.append("    if v:")
        lines.append(f"        out[{w.key!r}] = {_enc_value(w, 'v', ns)}")
    src = "\n".join(
        ["def encode(o):", f"    out = {{{', '.join(literal)}}}", *lines, "    return out"]
    )
    return _exec(src, ns, "encode", cls)


def _dec_value(w: WireField, ns: dict[str, Any], strict: bool) -> str:
    """The expression reading ``v`` (present, not None, or the default) as the field."""
    conv = _CONVERT[strict]
    if w.kind in conv:
        expr = f"{conv[w.kind]}(v)"
        if w.kind == "str" and w.rules.clip is not None:
            expr += f"[:{w.rules.clip}]"
        return expr
    if w.kind == "bool":
        return "v is True"
    if w.kind == "enum":
        ns[f"_E_{w.name}"] = w.target
        return f"_E_{w.name}(v)"
    if w.kind == "strs":
        item = f"{conv['str']}(a)" + (f"[:{w.rules.item_clip}]" if w.rules.item_clip else "")
        items = f"v[:{w.rules.clip}]" if w.rules.clip else "v"
        return f"tuple({item} for a in {items})"
    if w.kind == "strmap":
        return f"{{{conv['str']}(a): {conv['str']}(b) for a, b in v.items()}}"
    assert w.target is not None
    inner = _decoder(w.target, strict)
    ns[f"_dec_{w.name}"] = inner
    if w.kind == "records":
        return f"tuple(_dec_{w.name}(x) for x in v)"
    return f"_dec_{w.name}(v)"


def _decoder(cls: type, strict: bool) -> Callable[[Any], Any]:
    codec = _codec(cls)
    inner = codec.decode_strict if strict else codec.decode
    if _RULES[cls].invalid == "raise":
        return inner

    def or_none(d: Any) -> Any:
        try:
            return inner(d)
        except WireError:
            return None

    return or_none


def _compile_decoder(cls: type, ns: dict[str, Any], strict: bool) -> Callable[[Any], Any]:
    lines = [
        "def decode(d):",
        "    if d.__class__ is not dict and not isinstance(d, _Mapping):",
        "        raise _WireError(f'{_name}: not an object, {_short(d)}')",
        "    k = None",
        "    try:",
    ]
    for w in plan(cls):
        if w.computed is not None:
            continue
        if not w.rules.wire:
            ns[f"_D_{w.name}"] = w.default
            lines.append(f"        f_{w.name} = _D_{w.name}")
            continue
        keys = (w.key, *w.rules.aliases)
        lines.append(f"        k = {w.key!r}")
        if w.mode == "required":
            fetch = f"d[{w.key!r}]"
            for alias in w.rules.aliases:
                fetch = f"(d[{alias!r}] if {w.key!r} not in d else {fetch})"
        elif w.mode == "default" and strict and w.kind != "str":
            # strict: only an absent key or null takes the default (not 0 where text is due)
            ns[f"_D_{w.name}"] = w.default
            fetch = f"_D_{w.name}"
            for k in reversed(keys):
                fetch = f"_v if (_v := d.get({k!r})) is not None else {fetch}"
        elif w.mode == "default":
            ns[f"_D_{w.name}"] = w.default
            if strict:  # the first key present, as the run store always read them
                fetch = f"d.get({keys[-1]!r})"
                for k in reversed(keys[:-1]):
                    fetch = f"d.get({k!r}, {fetch})"
                fetch += f" or _D_{w.name}"
            else:  # the first key with a value
                fetch = " or ".join(f"d.get({k!r})" for k in keys) + f" or _D_{w.name}"
        else:
            fetch = f"d.get({keys[-1]!r})"
            for k in reversed(keys[:-1]):
                fetch = f"d.get({k!r}, {fetch})"
        lines.append(f"        v = {fetch}")
        if w.rules.check is not None:
            ns[f"_check_{w.name}"] = w.rules.check
            lines.append(f"        if not _check_{w.name}(v): raise ValueError('fails its check')")
        value = _dec_value(w, ns, strict)
        if w.kind in ("record",) and w.nullable:
            value = f"({value} if isinstance(v, _Mapping) else None)"
        elif w.mode == "optional" or w.nullable:
            value = f"(None if v is None else {value})"
        lines.append(f"        f_{w.name} = {value}")
    args = ", ".join(f"f_{f.name}" for f in dataclasses.fields(cls))
    lines += [
        f"        return _cls({args})",
        "    except _WireError:",
        "        raise",
        "    except KeyError:",
        "        raise _WireError(f'{_name}.{k}: missing') from None",
        "    except (TypeError, ValueError, OverflowError, AttributeError) as exc:",
        "        raise _WireError(f'{_name}.{k}: {exc}') from None",
    ]
    ns.update(_cls=cls, _name=cls.__name__)
    return _exec("\n".join(lines), ns, "decode", cls)


def _exec(src: str, ns: dict[str, Any], name: str, cls: type) -> Callable[..., Any]:
    code = compile(src, f"<aviflow.wire {name} {cls.__name__}>", "exec")
    exec(code, ns)  # source built above from the record's own definition, nothing else
    fn: Callable[..., Any] = ns[name]
    fn.__qualname__ = f"{cls.__name__}.wire_{name}"
    return fn


def _compile(cls: type) -> _Codec:
    base = {
        "_whole": _whole,
        "_number": _number,
        "_text": _text,
        "_object": _object,
        "_Mapping": Mapping,
        "_WireError": WireError,
        "_short": _short,
    }
    encode = _compile_encoder(cls, dict(base))
    return _Codec(
        encode, _compile_decoder(cls, dict(base), False), _compile_decoder(cls, dict(base), True)
    )


_ENCODE: dict[type, Callable[[Any], dict[str, Any]]] = {}  # the compiled functions, by class
_DECODE: dict[type, Callable[[Any], Any]] = {}


def to_wire(obj: Any) -> dict[str, Any]:
    """The record's wire form (a dict of JSON values)."""
    try:
        encode = _ENCODE[obj.__class__]
    except KeyError:
        encode = _ENCODE[obj.__class__] = _codec(type(obj)).encode
    return encode(obj)


def from_wire(cls: type[T], d: Mapping[str, Any], *, strict: bool = False) -> T:
    """The record ``cls`` read from its wire form (:class:`WireError` where it cannot be;
    see the module doc for ``strict``)."""
    if strict:
        return typing.cast(T, _codec(cls).decode_strict(d))
    try:
        decode = _DECODE[cls]
    except KeyError:
        decode = _DECODE[cls] = _codec(cls).decode
    return typing.cast(T, decode(d))


def from_wire_or_none(cls: type[T], d: object, *, strict: bool = False) -> T | None:
    """The record ``cls`` read from ``d``, or None where ``d`` is not an object or cannot be
    read (for records registered with ``invalid="none"``)."""
    if not isinstance(d, Mapping):
        return None
    try:
        return from_wire(cls, d, strict=strict)
    except WireError:
        return None
