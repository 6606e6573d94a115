"""The operator's settings for a plugin: one JSON object, checked once when the host loads
the plugin (``validate-settings``) and handed to every ``related`` and ``reconcile`` call.

Declare them as a dataclass deriving :class:`Settings`; its JSON Schema (shown by
``capstan inspect``) is derived from the fields, and parsing checks the JSON against that
schema before :meth:`Settings.validate` checks the values::

    @dataclass
    class GreeterSettings(Settings):
        \"\"\"What the operator configures for the greeter.\"\"\"
        salutation: str = setting("hello", "Prefix of every greeting.")
        max_length: int | None = setting(None, "Cut greetings here.", format="int32")

        def validate(self) -> None:
            if not self.salutation.strip():
                raise ValueError("salutation must not be empty")

Field names are snake_case in Python and camelCase in JSON (``max_length`` is
``maxLength``), as Kubernetes spells fields; unknown settings are refused, so a misspelt
one is reported rather than ignored. Errors name the setting at fault, on one line, e.g.
``maxLength: invalid type: string "x", expected integer``.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, ClassVar, Mapping, TypeVar, Union

from .names import rust_debug

S = TypeVar("S", bound="Settings")

_MISSING = dataclasses.MISSING
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1), "uint32": (0, 2**32 - 1)}


class SettingsError(ValueError):
    """Settings that do not parse or pass validation; the message is for the operator."""


def setting(default: Any = _MISSING, description: str | None = None, **schema: Any) -> Any:
    """A settings field: its default (none: required), description and extra JSON Schema
    keywords (``minimum``, ``format``, ``enum``, ``pattern``, ``minLength`` ...), which
    parsing enforces too."""
    kwargs: dict[str, Any] = {"metadata": {"description": description, "schema": schema}}
    if isinstance(default, (list, dict)):
        kwargs["default_factory"] = lambda d=default: json.loads(json.dumps(d))
    elif default is not _MISSING:
        kwargs["default"] = default
    return dataclasses.field(**kwargs)


class Settings:
    """Base of a plugin's settings dataclass; see the module docs."""

    _schema_cache: ClassVar[dict[str, Any] | None] = None

    def validate(self) -> None:
        """Check values the schema alone cannot; raise ``ValueError`` with a one-line
        message naming the setting (``backoffLimit must be at least 0, got -1``)."""

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """JSON Schema (draft 2020-12) of these settings, derived from the dataclass."""
        if "_schema_cache" not in cls.__dict__ or cls._schema_cache is None:
            cls._schema_cache = _derive(cls)
        return cls._schema_cache

    @classmethod
    def parse(cls: type[S], value: Any) -> S:
        """Settings from decoded JSON (None is ``{}``), checked against :meth:`schema` and
        :meth:`validate`; raises :class:`SettingsError`."""
        if value is None:
            value = {}
        check(value, cls.schema())
        settings = _construct(cls, value)
        try:
            settings.validate()
        except ValueError as e:
            raise SettingsError(str(e)) from None
        return settings

    @classmethod
    def parse_json(cls: type[S], text: str) -> S:
        """Settings from JSON text as the host sends it (empty or ``null`` is ``{}``)."""
        return cls.parse(load_json(text))

    def to_json(self) -> dict[str, Any]:
        """These settings as JSON would carry them (camelCase, None left out)."""
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if v is not None:
                out[camel(f.name)] = _unbuild(v)
        return out


def parse_text(cls: type[S], text: str, value: Any) -> S:
    """``cls.parse(value)`` where ``value`` is ``text`` decoded (afresh: the settings
    returned own it): the same answer, but once a text has parsed, later calls with it
    only construct the dataclass. Checking against the schema and :meth:`Settings.validate`
    are deterministic, so they passed for this text before and would pass again; what a
    call gets is a new object all the same, which it may change freely.

    A Wasm instance keeps module state between calls, so a plugin reused for many
    reconciles checks its settings once, not on every call."""
    key = (cls, text)
    if key in _PARSED:
        return _construct(cls, {} if value is None else value)
    settings = cls.parse(value)
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED.add(key)
    return settings


# (settings class, settings text) pairs that parsed; bounded, as settings change seldom.
_PARSED: set[tuple[type, str]] = set()
_PARSED_MAX = 64


def _construct(cls: type[S], value: dict[str, Any]) -> S:
    """The dataclass of already checked decoded JSON."""
    kwargs = {}
    for name, key, build in _fields(cls):
        if key in value:
            v = value[key]
            kwargs[name] = v if build is None else build(v)
    return cls(**kwargs)


_FIELDS: dict[type, tuple[tuple[str, str, Any], ...]] = {}


def _fields(cls: type) -> tuple[tuple[str, str, Any], ...]:
    """Each field's name, JSON key and how to build its value from JSON (None: as is),
    derived once per class: resolving type hints is the slow part of parsing."""
    out = _FIELDS.get(cls)
    if out is None:
        hints = typing.get_type_hints(cls)
        out = tuple(
            (f.name, camel(f.name), _builder(hints[f.name]))
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        )
        _FIELDS[cls] = out
    return out


_AS_IS = (str, int, bool, Any)


def _builder(t: Any) -> Any:
    """None when JSON's value is already the field's (``_build`` would return it as is),
    else a function building it."""
    inner = _optional_inner(t)
    if (inner if inner is not None else t) in _AS_IS:
        return None
    return lambda v: _build(t, v)


def load_json(text: str) -> Any:
    """Settings text as the host sends it; no settings at all reads as ``{}``."""
    if text == "{}" or text.strip() in ("", "null"):
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SettingsError(f"settings are not JSON: {e.msg}") from None


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def check_no_settings(plugin: str, value: Any) -> None:
    """What a plugin that declares no settings accepts: only ``{}``."""
    if isinstance(value, dict):
        if value:
            raise SettingsError(f"plugin {plugin} takes no settings (got {', '.join(value)})")
        return
    raise SettingsError(f"plugin {plugin} takes no settings (got {json.dumps(value)})")


# --- schema derivation --------------------------------------------------------------


def _derive(cls: type) -> dict[str, Any]:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} must be a dataclass to derive its schema")
    hints = typing.get_type_hints(cls)
    properties: dict[str, Any] = {}
    required = []
    for f in dataclasses.fields(cls):
        prop = _type_schema(hints[f.name])
        description = f.metadata.get("description")
        if description:
            prop = {"description": description, **prop}
        prop.update(f.metadata.get("schema") or {})
        if f.default is not _MISSING and f.default is not None:
            prop["default"] = _unbuild(f.default)
        elif f.default_factory is not _MISSING:
            prop["default"] = _unbuild(f.default_factory())
        elif f.default is _MISSING:
            required.append(camel(f.name))
        properties[camel(f.name)] = prop
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": cls.__name__,
    }
    doc = (cls.__doc__ or "").strip()
    if doc and not doc.startswith(cls.__name__ + "("):  # dataclass's generated doc says nothing
        schema["description"] = doc
    schema.update(type="object", properties=properties, additionalProperties=False)
    if required:
        schema["required"] = required
    return schema


def _optional_inner(t: Any) -> Any | None:
    if typing.get_origin(t) in (Union, types.UnionType):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(t)) == 2:
            return args[0]
    return None


def _type_schema(t: Any) -> dict[str, Any]:
    inner = _optional_inner(t)
    if inner is not None:
        s = _type_schema(inner)
        if isinstance(s.get("type"), str):
            s["type"] = [s["type"], "null"]
        else:
            s = {"anyOf": [s, {"type": "null"}]}
        return s
    origin = typing.get_origin(t)
    if t is str:
        return {"type": "string"}
    if t is bool:
        return {"type": "boolean"}
    if t is int:
        return {"type": "integer", "format": "int64"}
    if t is float:
        return {"type": "number", "format": "double"}
    if origin is list:
        (item,) = typing.get_args(t) or (Any,)
        return {"type": "array", "items": _type_schema(item)}
    if origin is dict:
        _, value = typing.get_args(t) or (str, Any)
        return {"type": "object", "additionalProperties": _type_schema(value)}
    if dataclasses.is_dataclass(t):
        s = _derive(t)
        del s["$schema"]
        return s
    if t is Any:
        return {}
    raise TypeError(f"settings field type {t!r} has no JSON Schema; use str, int, float, bool, list, dict, a dataclass or X | None")


def _build(t: Any, v: Any) -> Any:
    if v is None:
        return None
    inner = _optional_inner(t)
    if inner is not None:
        return _build(inner, v)
    origin = typing.get_origin(t)
    if origin is list:
        (item,) = typing.get_args(t) or (Any,)
        return [_build(item, x) for x in v]
    if origin is dict:
        _, value = typing.get_args(t) or (str, Any)
        return {k: _build(value, x) for k, x in v.items()}
    if dataclasses.is_dataclass(t):
        return _construct(t, v)
    if t is float and isinstance(v, int):
        return float(v)
    return v


def _unbuild(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {camel(f.name): _unbuild(getattr(v, f.name)) for f in dataclasses.fields(v) if getattr(v, f.name) is not None}
    if isinstance(v, list):
        return [_unbuild(x) for x in v]
    if isinstance(v, dict):
        return {k: _unbuild(x) for k, x in v.items()}
    return v


# --- validation against a schema ------------------------------------------------------


def check(value: Any, schema: Mapping[str, Any], path: str = "") -> None:
    """Check decoded JSON against the subset of JSON Schema that settings use (type,
    properties, required, additionalProperties, items, enum, const, minimum, maximum,
    exclusiveMinimum, exclusiveMaximum, minLength, maxLength, pattern, minItems, maxItems,
    integer formats, anyOf); raises :class:`SettingsError` naming the path at fault."""
    try:
        _check(value, schema, path)
    except _Invalid as e:
        where, why = e.args
        raise SettingsError(f"{where}: {why}" if where else why) from None


class _Invalid(Exception):
    pass


_JSON_TYPES = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def _describe(v: Any) -> str:
    # serde's wording ("invalid type: string \"x\"") so messages read like the Rust SDK's.
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{str(v).lower()}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{v}`"
    if isinstance(v, str):
        return f"string {rust_debug(v)}"
    if isinstance(v, list):
        return "sequence"
    return "map"


def _expected(schema: Mapping[str, Any], types_: list[str]) -> str:
    fmt = schema.get("format")
    if fmt in ("int32", "int64", "uint32"):
        return {"int32": "i32", "int64": "i64", "uint32": "u32"}[fmt]
    names = {"object": "a map", "array": "a sequence", "string": "a string", "boolean": "a boolean", "integer": "an integer", "number": "a number", "null": "null"}
    return " or ".join(names.get(t, t) for t in types_ if t != "null")


def _check(v: Any, schema: Mapping[str, Any], path: str) -> None:
    if "anyOf" in schema:
        errors = []
        for option in schema["anyOf"]:
            try:
                _check(v, option, path)
                break
            except _Invalid as e:
                errors.append(e)
        else:
            raise errors[0]
    t = schema.get("type")
    if t is not None:
        types_ = [t] if isinstance(t, str) else list(t)
        if not any(_JSON_TYPES[x](v) for x in types_ if x in _JSON_TYPES):
            raise _Invalid(path, f"invalid type: {_describe(v)}, expected {_expected(schema, types_)}")
    if "enum" in schema and v not in schema["enum"]:
        options = ", ".join(f"`{o}`" for o in schema["enum"])
        raise _Invalid(path, f"unknown variant {_describe(v)}, expected one of {options}")
    if "const" in schema and v != schema["const"]:
        raise _Invalid(path, f"must be {json.dumps(schema['const'])}")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        bounds = _INT_RANGES.get(schema.get("format", ""))
        if bounds and not bounds[0] <= v <= bounds[1]:
            raise _Invalid(path, f"invalid value: integer `{v}`, expected {_expected(schema, ['integer'])}")
        if "minimum" in schema and v < schema["minimum"]:
            raise _Invalid(path, f"must be at least {schema['minimum']}, got {v}")
        if "maximum" in schema and v > schema["maximum"]:
            raise _Invalid(path, f"must be at most {schema['maximum']}, got {v}")
        if "exclusiveMinimum" in schema and v <= schema["exclusiveMinimum"]:
            raise _Invalid(path, f"must be more than {schema['exclusiveMinimum']}, got {v}")
        if "exclusiveMaximum" in schema and v >= schema["exclusiveMaximum"]:
            raise _Invalid(path, f"must be less than {schema['exclusiveMaximum']}, got {v}")
    if isinstance(v, str):
        if "minLength" in schema and len(v) < schema["minLength"]:
            raise _Invalid(path, f"must be at least {schema['minLength']} characters long")
        if "maxLength" in schema and len(v) > schema["maxLength"]:
            raise _Invalid(path, f"must be at most {schema['maxLength']} characters long")
        if "pattern" in schema:
            import re

            if not re.search(schema["pattern"], v):
                raise _Invalid(path, f"{rust_debug(v)} does not match {schema['pattern']}")
    if isinstance(v, list):
        if "minItems" in schema and len(v) < schema["minItems"]:
            raise _Invalid(path, f"must have at least {schema['minItems']} items")
        if "maxItems" in schema and len(v) > schema["maxItems"]:
            raise _Invalid(path, f"must have at most {schema['maxItems']} items")
        if "items" in schema:
            for i, x in enumerate(v):
                _check(x, schema["items"], f"{path}[{i}]")
    if isinstance(v, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties", True)
        for key in schema.get("required") or ():
            if key not in v:
                raise _Invalid(path, f"missing field `{key}`")
        for key, x in v.items():
            sub = f"{path}.{key}" if path else key
            if key in props:
                _check(x, props[key], sub)
            elif extra is False:
                known = ", ".join(f"`{k}`" for k in props)
                expected = f"expected one of {known}" if props else "there are no fields"
                raise _Invalid(path, f"unknown field `{key}`, {expected}")
            elif isinstance(extra, dict):
                _check(x, extra, sub)
