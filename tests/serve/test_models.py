"""The tool-call format comes from the model (its chat template) or the pinned model table; a profile
cannot declare its way out of the parser rule and the tool gates (issue 14.5)."""

from __future__ import annotations

import json

import pytest

from materialize.series import load_series
from materialize.serve.constraints import check_profile
from materialize.serve.models import model_format
from materialize.serve.profile import load_profile

from .conftest import base_profile

QWEN_XML_TEMPLATE = ("{%- if tools %}<tools>{{ tools | tojson }}</tools>\nFor each function call return:\n"
                     "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue\n"
                     "</parameter>\n</function>\n</tool_call>{%- endif %}")
HERMES_TEMPLATE = ('{%- if tools %}For each function call, return a json object within <tool_call></tool_call>:\n'
                   '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>{%- endif %}')


def rules(write_profile, series_root, data):
    profile = load_profile(write_profile("m", data))
    return {v.rule: str(v) for v in check_profile(profile, load_series(series_root / "series/default.yaml"))}


def test_declaring_none_does_not_switch_off_the_parser_rule(write_profile, series_root):
    data = base_profile(model={"tool_call_format": "none"}, vllm={"tool_call_parser": None},
                        gates=[{"name": "models"}])
    found = rules(write_profile, series_root, data)
    assert "the profile declares none but Qwen/Qwen3.8-27B-FP8 emits qwen3_xml" in found["tool-call-format-from-model"]
    assert "no tool_call_parser" in found["tool-call-parser-matches-model"]
    assert "tool_call_stream" in found["tool-call-gates-required"]


def test_an_unknown_model_is_refused_until_its_format_is_known(write_profile, series_root):
    found = rules(write_profile, series_root, base_profile(model={"path": "someorg/new-model-7B"}))
    assert "cannot tell which tool-call format someorg/new-model-7B emits" in found["tool-call-format-from-model"]


@pytest.mark.parametrize(("files", "fmt"), [
    ({"chat_template.jinja": QWEN_XML_TEMPLATE}, "qwen3_xml"),
    ({"tokenizer_config.json": json.dumps({"chat_template": HERMES_TEMPLATE})}, "hermes_json"),
    ({"tokenizer_config.json": json.dumps({"chat_template": [{"name": "default", "template": "{{ messages }}"}]})},
     "none"),
    ({}, None),
])
def test_format_is_read_from_a_local_models_chat_template(tmp_path, files, fmt):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert model_format(str(tmp_path)).format == fmt


def test_a_local_model_that_emits_hermes_json_needs_the_hermes_parser(write_profile, series_root, tmp_path):
    (tmp_path / "chat_template.jinja").write_text(HERMES_TEMPLATE)
    found = rules(write_profile, series_root, base_profile(model={"path": str(tmp_path), "tool_call_format": None}))
    assert "parses qwen3_xml but model" in found["tool-call-parser-matches-model"]
    ok = rules(write_profile, series_root, base_profile(model={"path": str(tmp_path), "tool_call_format": None}, vllm={"tool_call_parser": "hermes"}))
    assert ok == {}
