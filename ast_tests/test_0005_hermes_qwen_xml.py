"""0005: the hermes tool parser returns Qwen3 XML calls as tool_calls instead of leaking them as content.

Runs the real ``Hermes2ProToolParser.extract_tool_calls`` from the tree. vLLM's protocol classes are
replaced by explicit stubs with the same fields; the Qwen XML helper is extracted from the same tree.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from materialize.offline import extract

HERMES = "vllm/tool_parsers/hermes_tool_parser.py"
QWEN_XML = "vllm/tool_parsers/qwen_xml_call.py"


@dataclass
class FunctionCall:
    name: str
    arguments: str


@dataclass
class ToolCall:
    function: FunctionCall
    type: str = "function"


@dataclass
class ExtractedToolCallInformation:
    tools_called: bool
    tool_calls: list = field(default_factory=list)
    content: str | None = None


class ToolParser:  # the abstract base: extract_tool_calls needs nothing from it
    pass


def _parser(tree):
    helper = extract(tree, QWEN_XML, "parse_qwen_xml_function")
    module = extract(
        tree,
        HERMES,
        "Hermes2ProToolParser.extract_tool_calls",
        stubs={
            "re": re,  # the module uses the third-party `regex` as `re`; stdlib re covers these patterns
            "ToolParser": ToolParser,
            "ToolCall": ToolCall,
            "FunctionCall": FunctionCall,
            "ExtractedToolCallInformation": ExtractedToolCallInformation,
            "ChatCompletionRequest": object,  # only the signature's annotation: evaluated at def time
            "init_logger": logging.getLogger,
            # replaces the file's own `from vllm.tool_parsers.qwen_xml_call import ...`: without that
            # import line the stub is refused, so a lost import cannot hide behind it
            "parse_qwen_xml_function": helper.parse_qwen_xml_function,
        },
    )
    cls = module.Hermes2ProToolParser
    return cls.__new__(cls)  # __init__ wants a tokenizer; extract_tool_calls does not


def _request(**properties):
    function = SimpleNamespace(name="get_weather", parameters={"properties": properties})
    return SimpleNamespace(tools=[SimpleNamespace(function=function)])


INCIDENT = "<tool_call>\n<function=lookup_record>\n<parameter=record_id>\nR0000\n</parameter>\n</function>\n</tool_call>"


@pytest.mark.parametrize(
    ("output", "name", "arguments", "content"),
    [
        (INCIDENT, "lookup_record", {"record_id": "R0000"}, None),
        (
            "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPrague\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
            "get_weather",
            {"city": "Prague", "days": 3},
            "Checking.\n",
        ),
    ],
    ids=["incident", "typed-with-content"],
)
def test_qwen_xml_calls_are_parsed(tree, output, name, arguments, content):
    parser = _parser(tree)
    request = _request(city={"type": "string"}, days={"type": "integer"})
    # JSON calls keep working exactly as before (regression guard inside the same test)
    legacy = parser.extract_tool_calls('<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', request)
    assert legacy.tools_called and legacy.tool_calls[0].function.name == "f"
    result = parser.extract_tool_calls(output, request)
    assert result.tools_called, f"tool call not parsed; leaked as content: {result.content!r}"
    assert [c.function.name for c in result.tool_calls] == [name]
    assert json.loads(result.tool_calls[0].function.arguments) == arguments
    assert result.content == content
    assert "<function=" not in (result.content or "")
