from dataclasses import dataclass

import pytest

from capstan_sdk import KindRef, Metadata, Settings, SettingsError, setting
from capstan_sdk.settings import check

PARENT = KindRef("example.com", "v1", "Greeting", "greetings")


@dataclass
class Inner(Settings):
    port: int = setting(80, minimum=1, maximum=65535)


@dataclass
class GreeterSettings(Settings):
    """What the operator configures for the greeter."""

    salutation: str = setting("hello", "Prefix of every greeting.")
    max_length: int | None = setting(None, "Cut greetings here.", format="int32", minimum=0)
    tags: list[str] = setting([], "Labels to add.")
    inner: Inner | None = setting(None)

    def validate(self) -> None:
        if not self.salutation.strip():
            raise ValueError("salutation must not be empty")


def test_the_schema_is_derived_from_the_dataclass():
    s = GreeterSettings.schema()
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert (s["title"], s["description"], s["type"], s["additionalProperties"]) == (
        "GreeterSettings",
        "What the operator configures for the greeter.",
        "object",
        False,
    )
    assert s["properties"]["salutation"] == {"description": "Prefix of every greeting.", "type": "string", "default": "hello"}
    assert s["properties"]["maxLength"]["type"] == ["integer", "null"]
    assert s["properties"]["maxLength"]["format"] == "int32"
    assert s["properties"]["tags"]["items"] == {"type": "string"}
    assert "required" not in s


def test_parsing_fills_defaults_and_maps_camel_case():
    s = GreeterSettings.parse({"maxLength": 10, "inner": {"port": 8080}})
    assert (s.salutation, s.max_length, s.tags, s.inner) == ("hello", 10, [], Inner(8080))
    assert GreeterSettings.parse_json("") == GreeterSettings()
    assert GreeterSettings.parse_json("null") == GreeterSettings()
    assert GreeterSettings.parse({"tags": ["a"]}).to_json() == {"salutation": "hello", "tags": ["a"]}


@pytest.mark.parametrize(
    "value, message",
    [
        ({"maxLength": "x"}, 'maxLength: invalid type: string "x", expected i32'),
        ({"maxLength": 2**31}, "maxLength: invalid value: integer `2147483648`, expected i32"),
        ({"maxLength": -1}, "maxLength: must be at least 0, got -1"),
        ({"salutaton": "hi"}, "unknown field `salutaton`, expected one of `salutation`, `maxLength`, `tags`, `inner`"),
        ({"tags": ["a", 1]}, "tags[1]: invalid type: integer `1`, expected a string"),
        ({"inner": {"port": 0}}, "inner.port: must be at least 1, got 0"),
        ({"salutation": " "}, "salutation must not be empty"),
        ([], "invalid type: sequence, expected a map"),
    ],
)
def test_errors_name_the_setting_on_one_line(value, message):
    with pytest.raises(SettingsError) as e:
        GreeterSettings.parse(value)
    assert str(e.value) == message


def test_metadata_validates_settings_as_the_export_does():
    m = Metadata("greeter", "0.1.0", parent=PARENT).settings(GreeterSettings)
    assert m.validate_settings("{}") is None
    assert m.validate_settings('{"salutation": ""}') == "salutation must not be empty"
    assert m.validate_settings("{nope").startswith("settings are not JSON")
    bare = Metadata("bare", "0.1.0", parent=PARENT)
    assert bare.settings_schema is None
    assert bare.validate_settings("{}") is None
    assert bare.validate_settings("") is None
    assert bare.validate_settings('{"x": 1}') == "plugin bare takes no settings (got x)"


def test_plain_schemas_check_too():
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"enum": ["x", "y"]}}}
    check({"a": "x"}, schema)
    with pytest.raises(SettingsError, match="missing field `a`"):
        check({}, schema)
    with pytest.raises(SettingsError, match="unknown variant"):
        check({"a": "z"}, schema)


def test_a_settings_text_parses_once_and_answers_the_same_each_time(monkeypatch):
    import json

    from capstan_sdk import settings as module
    from capstan_sdk.context import Context

    calls = []
    real_check = module.check
    monkeypatch.setattr(module, "check", lambda value, schema: (calls.append(1), real_check(value, schema)))
    monkeypatch.setattr(module, "_PARSED", set())
    text = '{"salutation":"hi","tags":["a"],"inner":{"port":8080},"maxLength":3}'

    def parsed():
        return Context(raw_settings=json.loads(text), settings_text=text).settings(GreeterSettings)

    first, second = parsed(), parsed()
    assert first == second == GreeterSettings.parse(json.loads(text))
    assert len(calls) == 2, "checked when first parsed (and by parse itself), not again"
    assert first is not second and first.tags is not second.tags and first.inner is not second.inner
    first.tags.append("changed")
    assert parsed().tags == ["a"], "a call's settings are its own"

    # A text that fails is checked (and fails) every time.
    bad = '{"salutation":" "}'
    for _ in range(2):
        with pytest.raises(Exception, match="salutation must not be empty"):
            Context(raw_settings=json.loads(bad), settings_text=bad).settings(GreeterSettings)
    assert Metadata("g", "1", parent=PARENT).settings(GreeterSettings).validate_settings(bad) == "salutation must not be empty"


def test_the_texts_remembered_are_bounded(monkeypatch):
    from capstan_sdk import settings as module

    monkeypatch.setattr(module, "_PARSED", set())
    for n in range(module._PARSED_MAX * 2):
        module.parse_text(GreeterSettings, f'{{"maxLength":{n}}}', {"maxLength": n})
    assert len(module._PARSED) <= module._PARSED_MAX
