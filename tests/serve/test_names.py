"""Names a plan uses exist in the materialized source (vLLM's argparse, os.environ reads) or are declared
unverified in the profile with where they come from, and `serve check` lists them (issue 14.9)."""

from __future__ import annotations

import pytest
import yaml

from materialize.errors import MaterializeError
from materialize.serve.names import check_names
from materialize.serve.up import prepare

from .conftest import UNPINNED, base_profile, write_series


def plan_error(write_profile, tmp_path, data) -> str:
    with pytest.raises(MaterializeError) as exc:
        prepare(write_profile("n", data), sources_dir=tmp_path / "s")
    return str(exc.value)


def test_an_environment_variable_nothing_reads_is_refused(write_profile, tmp_path):
    text = plan_error(write_profile, tmp_path, base_profile(env={"TT_METAL_CACHE": "/c", "QWEN36_SDPA_STREAMNG": "1"}))
    assert "env QWEN36_SDPA_STREAMNG exists nowhere in the pinned source" in text
    assert "n.yaml:" in text


def test_an_option_the_pinned_vllm_does_not_define_is_refused(write_profile, tmp_path):
    text = plan_error(write_profile, tmp_path, base_profile(vllm={"extra_args": ["--max-num-batched-token", "8"]}))
    assert "option --max-num-batched-token exists nowhere in the pinned source" in text
    ok = prepare(write_profile("n", base_profile(vllm={"extra_args": ["--max-num-batched-tokens", "8"]})),
                 sources_dir=tmp_path / "s")
    assert "--max-num-batched-tokens" in ok.plan.server_argv


def test_tt_config_keys_must_be_declared(write_profile, tmp_path):
    data = base_profile(tt={"trace_mode": "all"})
    data["unverified"] = {"TT_METAL_CACHE": UNPINNED["TT_METAL_CACHE"]}
    text = plan_error(write_profile, tmp_path, data)
    assert "option --override-tt-config exists nowhere" in text and "config-key trace_mode exists nowhere" in text
    plan = prepare(write_profile("n", base_profile(tt={"trace_mode": "all"})), sources_dir=tmp_path / "s").plan
    assert {u["name"] for u in plan.unverified} >= {"--override-tt-config", "trace_mode", "TT_METAL_CACHE"}


def test_flags_of_the_series_are_found_where_the_patch_reads_them(write_profile, tmp_path):
    plan = prepare(write_profile("n", base_profile(enable=["QWEN36_SDPA_STREAMING", "QWEN36_DEVICE_RESIDENT"],
                                                   tt={"device_argmax": True})), sources_dir=tmp_path / "s").plan
    assert not {"QWEN36_SDPA_STREAMING", "QWEN36_DEVICE_RESIDENT"} & {u["name"] for u in plan.unverified}


def test_rule_names_the_source_never_reads_are_listed(write_profile, tmp_path):
    prep = prepare(write_profile("n", base_profile()), sources_dir=tmp_path / "s")
    from materialize.serve.names import index_for

    index = index_for(prep.materialization.store, prep.manifest)
    _, unverified = check_names(prep.profile, [], {}, index, {"QWEN36_NOT_IN_ANY_TREE": "some-rule"})
    assert unverified == [{"name": "QWEN36_NOT_IN_ANY_TREE", "kind": "env",
                           "source": "named by rule some-rule; the pinned source never reads it"}]


def test_serve_check_lists_unverified_names(invoke, series_root, write_profile, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_profile("listed", base_profile(tt={"trace_mode": "all"}))
    result = invoke("serve", "--profiles", series_root / "serve/profiles", "--sources-dir", tmp_path / "s",
                    "check", "listed")
    assert result.return_value == 0, result.output
    assert "unverified option --override-tt-config: the TT build of vLLM" in result.output
    assert "unverified env TT_METAL_CACHE: tt-metal's C++ runtime" in result.output
    assert "gate tool_call_stream: 6 requests at concurrency 1 (rules out a failure rate of 1/2" in result.output


def test_the_vllm_tree_is_found_by_its_content_not_its_target_name(tmp_path):
    """Targets are named by the series: serve finds vLLM's argparse in whichever target holds ``vllm/``."""
    root = tmp_path / "renamed"
    write_series(root, targets=("kernels", "serving"))
    (root / "serve/profiles").mkdir(parents=True)
    profile = root / "serve/profiles/n.yaml"
    profile.write_text(yaml.safe_dump(base_profile(vllm={"extra_args": ["--max-num-batched-tokens", "8"]})))
    prepared = prepare(profile, sources_dir=tmp_path / "s")
    assert "--max-num-batched-tokens" in prepared.plan.server_argv
    profile.write_text(yaml.safe_dump(base_profile(vllm={"extra_args": ["--max-num-batched-token", "8"]})))
    with pytest.raises(MaterializeError, match="option --max-num-batched-token exists nowhere"):
        prepare(profile, sources_dir=tmp_path / "s")


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ('import os\nX = os.environ.get("QWEN36_FLAG")\n', True),
        ('import os\nFLAG = "QWEN36_FLAG"\n\ndef on():\n    return os.getenv(FLAG) == "1"\n', True),
        ('from os import environ\nON = "QWEN36_FLAG" in environ\n', True),
        # named, but not as a string the code uses
        ('import os\n# set "QWEN36_FLAG" to switch it on\nX = os.environ.get("OTHER")\n', False),
        ('"""Set "QWEN36_FLAG"."""\nimport os\nX = os.environ.get("OTHER")\n', False),
        ('import os\ndef f():\n    """QWEN36_FLAG"""\n    return os.environ.get("OTHER")\n', False),
        ('import os\nprint("QWEN36_FLAG is deprecated")\nX = os.environ.get("OTHER")\n', False),
        # a string, but nothing reads the environment (only a comment says os.environ)
        ('FLAG = "QWEN36_FLAG"  # read with os.environ elsewhere\n', False),
        # bodies that are one expression, not statements (vLLM's envs.py is a dict of such lambdas)
        ('import os\nG = {"QWEN36_FLAG": lambda: os.getenv("QWEN36_FLAG"), "U": lambda: f"{os.sep}x"}\n', True),
        ('import os\nX = os.getenv("A") if os else "QWEN36_FLAG"\ntry:\n    pass\nfinally:\n    "QWEN36_FLAG"\n', True),
        ('import os\nfor _ in ():\n    pass\nelse:\n    """QWEN36_FLAG"""\nX = os.getenv("A")\n', False),
    ],
    ids=["direct", "constant", "in-environ", "comment", "module-docstring", "function-docstring", "message",
         "no-read", "lambda-bodies", "if-expression", "bare-string-in-else"],
)
def test_an_environment_variable_counts_as_read_only_when_code_names_it(text, read):
    from materialize.serve.names import names_env_var

    assert names_env_var(text, "QWEN36_FLAG") is read


@pytest.mark.parametrize(
    ("extra", "text"),
    [
        # an alias of a managed option that only the pinned argparse declares: the last value would win
        (["-mns", "64"], "-mns reaches --max-num-seqs"),
        (["-mns=64"], "-mns=64 reaches --max-num-seqs"),
        (["-mns64"], "-mns64 is not an option"),  # argparse would not read it as -mns either
        # --no-x exists only for a BooleanOptionalAction; --seed takes a value
        (["--no-seed"], "--no-seed is not an option"),
        (["--no-max-num-batched-tokens"], "--no-max-num-batched-tokens is not an option"),
        (["-zzz-bogus"], "-zzz-bogus is not an option"),
        # argparse would take -m as an abbreviation of -mns: abbreviations are not resolved, so refused
        (["-m", "8"], "-m is not an option"),
        # a word no option takes as its value is a positional (vLLM's model_tag)
        (["--seed", "0", "stray"], "'stray' is a bare word"),
        (["--enforce-eager", "yes"], "'yes' is a bare word"),
        (["--seed"], "--seed needs a value"),
    ],
)
def test_extra_args_resolve_through_the_pinned_argparse_or_are_refused(write_profile, tmp_path, extra, text):
    message = plan_error(write_profile, tmp_path, base_profile(vllm={"extra_args": extra}))
    assert text in message, message
    assert "n.yaml:" in message


def test_extra_args_that_resolve_to_unmanaged_options_pass(write_profile, tmp_path):
    extra = ["--seed", "0", "--max_num_batched_tokens=8192", "--no-enforce-eager", "--enforce-eager"]
    plan = prepare(write_profile("n", base_profile(vllm={"extra_args": extra})), sources_dir=tmp_path / "s").plan
    assert plan.server_argv[-len(extra):] == extra


def test_the_source_resolves_aliases_whatever_the_built_in_table_says(write_profile, tmp_path):
    """The rules' table of vLLM's short aliases is a fallback: the plan resolves every word through the
    materialized argparse, so -tp and --disable-x are refused by the source too."""
    from materialize.serve.names import index_for

    prep = prepare(write_profile("n", base_profile()), sources_dir=tmp_path / "s")
    index = index_for(prep.materialization.store, prep.manifest)
    argv = ["--seed", "0", "-tp", "8", "--disable-prefix-caching", "--no-disable-prefix-caching", "--no-async-scheduling"]
    problems, _ = check_names(prep.profile, argv, {}, index, {}, extra_from=0)
    text = "\n".join(problems)
    assert "-tp reaches --tensor-parallel-size" in text
    assert "--disable-prefix-caching reaches --enable-prefix-caching" in text
    assert "--no-disable-prefix-caching reaches --enable-prefix-caching" in text
    assert "--no-async-scheduling reaches --async-scheduling" in text  # derived from SchedulerConfig's bool
    assert len(problems) == 4, text


def test_rendered_options_resolve_through_the_pinned_argparse_as_extra_args_do(write_profile, tmp_path):
    """The options the plan renders are read as vLLM will read them, like extra_args: `--no-x` exists
    only for a BooleanOptionalAction (a store_true `--async-scheduling` has no `--no-async-scheduling`:
    vLLM would refuse the argv at boot, on hardware), and an option rendered without a value must be a
    flag there."""
    from materialize.serve.names import CliOption, index_for

    prep = prepare(write_profile("n", base_profile(vllm={"async_scheduling": False})), sources_dir=tmp_path / "s")
    index = index_for(prep.materialization.store, prep.manifest)
    argv = prep.plan.server_argv[3:]  # after `python3 -m vllm.entrypoints.openai.api_server`
    problems, _ = check_names(prep.profile, argv, {}, index, {}, extra_from=len(argv))
    assert problems == []
    table = dict(index.cli_table())
    table["--async-scheduling"] = CliOption("--async-scheduling", ("--async-scheduling",), "flag")
    del table["--no-async-scheduling"]
    for string in table["--enable-prefix-caching"].strings:  # an option taking a value: no negations
        table.pop(string)
    table["--enable-prefix-caching"] = CliOption("--enable-prefix-caching", ("--enable-prefix-caching",), "value")
    index._options = table
    problems, _ = check_names(prep.profile, argv, {}, index, {}, extra_from=len(argv))
    text = "\n".join(problems)
    assert "--no-async-scheduling" in text and "not a boolean" in text, text
    assert "--no-enable-prefix-caching" in text, text
    assert all("n.yaml:" in p for p in problems)


def test_what_the_trees_yield_is_kept_and_an_unchanged_materialization_is_planned_without_its_source(
        write_profile, tmp_path):
    """`serve plan` grepped and parsed the whole pinned vLLM for every config field an option unpacks
    (50 s of CPU a plan); the option table and each variable's reader are a pure function of the trees
    and of names.py, so they are kept and read back, identical, without a single `git grep`."""
    from materialize.serve.names import index_for

    prep = prepare(write_profile("n", base_profile()), sources_dir=tmp_path / "s")
    store = prep.materialization.store
    first = index_for(store, prep.manifest)
    table = first.cli_table()
    readers = {name: first.env_reader(name) for name in ("QWEN36_SDPA_STREAMING", "QWEN36_NOT_IN_ANY_TREE")}
    assert table["-tp"].name == "--tensor-parallel-size" and readers["QWEN36_SDPA_STREAMING"]
    kept = first._kept_file
    assert kept.is_file()

    again = index_for(store, prep.manifest)
    real_git = store.git

    def no_grep(*args, **kwargs):
        assert args[0] != "grep", "a kept result was searched for again"
        return real_git(*args, **kwargs)

    store.git = no_grep
    try:
        assert again.cli_table() == table
        assert {name: again.env_reader(name) for name in readers} == readers
    finally:
        store.git = real_git

    kept.write_text("{not json")  # damaged: found again from the source, the same
    third = index_for(store, prep.manifest)
    assert third.cli_table() == table and third.env_reader("QWEN36_SDPA_STREAMING") == readers["QWEN36_SDPA_STREAMING"]
    kept.write_text('{"options": [["-x", 1]], "env": {"QWEN36_SDPA_STREAMING": 3}}')  # JSON, not ours
    fourth = index_for(store, prep.manifest)
    assert fourth.cli_table() == table and fourth.env_reader("QWEN36_SDPA_STREAMING") == readers["QWEN36_SDPA_STREAMING"]
