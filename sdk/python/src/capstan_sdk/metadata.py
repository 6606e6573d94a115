"""What a plugin declares about itself: name, version, kinds, settings, finalizer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from .kinds import KindRef
from .settings import Settings, SettingsError, check_no_settings, load_json, parse_text


@dataclass(frozen=True)
class Metadata:
    """A plugin's self-description, built fluently::

        Metadata("echo", "0.1.0", parent=ECHO).child(JOB).related(CONFIG_MAP).settings(EchoSettings)

    Unlike the Rust SDK, where the parent kind comes from the parent's type, a Python
    plugin names it here.
    """

    name: str
    version: str
    parent: KindRef
    children: tuple[KindRef, ...] = ()
    related_kinds: tuple[KindRef, ...] = ()
    settings_type: type[Settings] | None = None
    finalizer: str | None = None
    _schema: dict[str, Any] | None = field(default=None, compare=False)

    def child(self, kind: KindRef) -> "Metadata":
        """Declare that the plugin may create children of ``kind``."""
        return replace(self, children=self.children + (kind,))

    def related(self, kind: KindRef) -> "Metadata":
        """Declare that the plugin reads objects of ``kind`` (never writes them): the host
        watches them and passes each parent those its ``related`` queries select."""
        return replace(self, related_kinds=self.related_kinds + (kind,))

    def settings(self, settings_type: type[Settings]) -> "Metadata":
        """Declare the settings dataclass: its schema goes to the host, and the operator's
        settings must parse as it and pass its ``validate`` before the host loads the plugin."""
        return replace(self, settings_type=settings_type)

    def with_finalizer(self, name: str) -> "Metadata":
        """Hold deletion of each parent with this finalizer until the plugin reports ``finalized``."""
        return replace(self, finalizer=name)

    @property
    def settings_schema(self) -> dict[str, Any] | None:
        """JSON Schema of the declared settings, if any."""
        return self.settings_type.schema() if self.settings_type else None

    def settings_schema_json(self) -> str | None:
        schema = self.settings_schema
        return None if schema is None else json.dumps(schema, separators=(",", ":"), ensure_ascii=False)

    def validate_settings(self, settings: str | dict[str, Any] | None) -> str | None:
        """None when the host would load the plugin with these settings (JSON text or a
        decoded object), else the one-line reason, as the ``validate-settings`` export says."""
        try:
            value = load_json(settings) if isinstance(settings, str) else (settings or {})
            if self.settings_type is None:
                check_no_settings(self.name, value)
            elif isinstance(settings, str):
                parse_text(self.settings_type, settings, value)
            else:
                self.settings_type.parse(value)
        except SettingsError as e:
            return str(e)
        return None
