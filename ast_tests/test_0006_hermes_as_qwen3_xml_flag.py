"""0006: QWEN36_HERMES_AS_QWEN3_XML (default off) routes 'hermes' to qwen3_xml and logs its banner.

Flag and banner are read from the series entry, so the code and the series cannot drift apart.
"""

from __future__ import annotations

from materialize.offline import extract

MODULE = "vllm/tool_parsers/__init__.py"
QWEN3_XML = ("vllm.tool_parsers.qwen3_engine_tool_parser", "Qwen3EngineToolParser")
HERMES = ("vllm.tool_parsers.hermes_tool_parser", "Hermes2ProToolParser")


class _Registry:
    def __init__(self) -> None:
        self.lazy: dict[str, tuple[str, str]] = {}

    def register_lazy_module(self, name: str, module_path: str, class_name: str) -> None:
        self.lazy[name] = (module_path, class_name)


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, name: str) -> _Log:  # stands in for vllm.logger.init_logger
        return self

    def warning(self, message: str, *args) -> None:
        self.lines.append(message % args if args else message)

    info = warning


def _register(tree):
    registry, log = _Registry(), _Log()
    module = extract(
        tree, MODULE, "register_lazy_tool_parsers", stubs={"ToolParserManager": registry, "init_logger": log}
    )
    module.register_lazy_tool_parsers()
    return registry.lazy, log.lines


def test_flag_routes_hermes_and_prints_banner(tree, patch_entry, monkeypatch):
    assert patch_entry.flag and patch_entry.banner, "0006 must declare its flag and banner in the series"
    monkeypatch.delenv(patch_entry.flag, raising=False)
    off, off_log = _register(tree)
    assert off["hermes"] == HERMES, "default off: the registry must be unchanged"
    assert patch_entry.banner not in off_log

    monkeypatch.setenv(patch_entry.flag, "1")
    on, on_log = _register(tree)
    assert on["hermes"] == QWEN3_XML, f"{patch_entry.flag}=1 did not route 'hermes' to qwen3_xml"
    assert on_log.count(patch_entry.banner) == 1, f"banner not logged exactly once: {on_log}"
    assert {k: v for k, v in on.items() if k != "hermes"} == {k: v for k, v in off.items() if k != "hermes"}

    # only "1" engages: any other value (a typo, "true", an empty override) leaves the registry alone
    for value in ("0", "", "true", "yes", "on", "2", " 1", "1 "):
        monkeypatch.setenv(patch_entry.flag, value)
        registry, log = _register(tree)
        assert registry["hermes"] == HERMES, f"{patch_entry.flag}={value!r} must not engage"
        assert patch_entry.banner not in log, f"banner logged for {patch_entry.flag}={value!r}"
