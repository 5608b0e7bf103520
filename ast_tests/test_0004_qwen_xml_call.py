"""0004: parse_qwen_xml_function, the new dependency-free Qwen3 XML tool-call parser."""

from __future__ import annotations

import pytest

from materialize.offline import extract

MODULE = "vllm/tool_parsers/qwen_xml_call.py"
NEW_FILE = "qwen_xml_call.py is a new file in 0004; 0005's test runs it against the hermes parser"


def _parse(tree):
    return extract(tree, MODULE, "parse_qwen_xml_function").parse_qwen_xml_function


@pytest.mark.weak_control(NEW_FILE)
def test_the_call_from_the_incident(tree):
    """The exact body production returned as content in seed PR #34."""
    body = "<function=lookup_record>\n<parameter=record_id>\nR0000\n</parameter>\n</function>"
    assert _parse(tree)(body) == ("lookup_record", {"record_id": "R0000"})


@pytest.mark.weak_control(NEW_FILE)
def test_schema_types_values(tree):
    body = (
        "<function=get_weather>\n<parameter=city>\nPrague\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=units>\n{\"temp\": \"C\"}\n</parameter>\n</function>"
    )
    types = {"get_weather": {"city": "string", "days": "integer", "units": "object"}}
    assert _parse(tree)(body, types) == ("get_weather", {"city": "Prague", "days": 3, "units": {"temp": "C"}})
    # untyped values stay strings: "3" is not silently turned into an int
    assert _parse(tree)(body)[1]["days"] == "3"


@pytest.mark.weak_control(NEW_FILE)
@pytest.mark.parametrize(
    ("json_type", "raw", "value"),
    [
        ("boolean", "true", True),
        ("boolean", "false", False),
        ("number", "2.5", 2.5),
        ("integer", "-7", -7),
        ("array", '["a", 1]', ["a", 1]),
        ("object", '{"k": null}', {"k": None}),
        ("null", "null", None),
        ("string", "true", "true"),  # a string-typed "true" stays a string
        ("boolean", "not json", "not json"),  # undecodable: the raw text, never an exception
    ],
)
def test_every_json_schema_type_is_decoded(tree, json_type, raw, value):
    body = f"<function=f>\n<parameter=p>\n{raw}\n</parameter>\n</function>"
    assert _parse(tree)(body, {"f": {"p": json_type}}) == ("f", {"p": value})


@pytest.mark.weak_control(NEW_FILE)
def test_only_one_newline_is_framing(tree):
    body = "<function=write>\n<parameter=text>\n\n  indented\n\n</parameter>\n</function>"
    assert _parse(tree)(body) == ("write", {"text": "\n  indented\n"})


@pytest.mark.weak_control(NEW_FILE)
@pytest.mark.parametrize(
    "body",
    [
        '{"name": "get_weather", "arguments": {"city": "Prague"}}',
        "plain text",
        "<function=f><parameter=a>1</parameter>",  # unterminated
        "text before <function=f></function>",
        "<function=f></function> trailing text",
    ],
)
def test_not_a_qwen_call(tree, body):
    assert _parse(tree)(body) is None
