"""Which tool-call format a served model emits: read from the model, or from a pinned table with evidence.

Seed 000: the model emits Qwen XML inside ``<tool_call>``; production parsed it as hermes JSON and tool
calling returned nothing. The parser rule compares the parser with the model's format, so that format
must not be something a profile can simply declare (``tool_call_format: none`` used to switch off the
parser rule and the tool gates). It comes from the model's own chat template when the model is a local
directory, else from ``KNOWN_MODELS`` below (each entry says where the format was observed); a model in
neither is refused until someone adds it with evidence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FORMATS = ("qwen3_xml", "hermes_json", "none")


@dataclass(frozen=True)
class ModelFormat:
    format: str | None
    source: str


# Hub ids whose emitted tool-call format was observed, and where. Add a model only with evidence.
KNOWN_MODELS: dict[str, tuple[str, str]] = {
    "Qwen/Qwen3.8-27B-FP8": (
        "qwen3_xml",
        "observed (seed PR #34): non-streamed content = <tool_call> <function=lookup_record> "
        "<parameter=record_id> R0000 </parameter> </function> </tool_call>",
    ),
}

TEMPLATE_FILES = ("chat_template.jinja", "tokenizer_config.json")


def template_format(template: str) -> str:
    """The format a chat template teaches the model to emit for tool calls."""
    if "<function=" in template and "<parameter=" in template:
        return "qwen3_xml"
    if "<tool_call>" in template:
        return "hermes_json"
    return "none"


def _template_text(model_dir: Path) -> tuple[str, Path] | None:
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace"), jinja
    config = model_dir / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
            template = "\n".join(t.get("template", "") for t in template if isinstance(t, dict))
        if isinstance(template, str):
            return template, config
    return None


def model_format(model_path: str) -> ModelFormat:
    """The format ``model_path`` emits, and where that was read; ``format=None`` when unknown."""
    local = Path(model_path)
    if local.is_dir():
        found = _template_text(local)
        if found is None:
            return ModelFormat(None, f"{local} has no chat template ({' or '.join(TEMPLATE_FILES)})")
        text, path = found
        return ModelFormat(template_format(text), f"chat template {path}")
    if model_path in KNOWN_MODELS:
        fmt, evidence = KNOWN_MODELS[model_path]
        return ModelFormat(fmt, f"pinned model table (materialize/serve/models.py): {evidence}")
    return ModelFormat(None, f"{model_path} is neither a local model directory nor in the pinned model table "
                             f"(materialize/serve/models.py)")
