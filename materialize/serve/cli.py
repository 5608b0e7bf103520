"""``materialize serve ...``: wiring only; every command returns an exit code.

Register with ``cli.add_command(serve_group)`` (the object is ``materialize.serve.cli:serve_group``).
User errors are ``MaterializeError``s, turned into one line by the top-level handler.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from materialize.cliargs import UsageError, group, option
from materialize.console import write
from materialize.errors import MaterializeError

PROFILES_DIR = Path("serve/profiles")
LEDGER_DIR = Path("bench/runs")
LOG_DIR = Path("build/serve/logs")

json_option = option("--json", dest="as_json", action="store_true", help="machine-readable output on stdout")
manifest_option = option("--from-output", dest="output_dir", type=Path,
                               help="plan from an existing materialized output (its manifest.json) instead of "
                                    "materializing now")


def _profile_path(obj: dict, ref: str) -> Path:
    from materialize.serve.profile import find_profile

    return find_profile(ref, obj["profiles"])


def _prepare(obj: dict, ref: str, output_dir: Path | None = None, materialize: bool = True):
    """Plan a profile. Writes nothing: no output is published and ``latest`` is never repointed."""
    from materialize.serve.up import prepare

    return prepare(_profile_path(obj, ref), materialize=materialize, manifest_dir=output_dir,
                   sources_dir=obj["sources"])


@group("serve", pass_obj=True)
@option("--profiles", dest="profiles_dir", type=Path, default=PROFILES_DIR,
        show_default=True, help="directory of serving profiles")
@option("--sources-dir", dest="sources_dir", type=Path, default=None,
        help="durable, content-addressed home of served sources (default /var/lib/materialize/serve/"
                   "sources; env MATERIALIZE_SERVE_SOURCES); `materialize gc` never touches it")
def serve_group(profiles_dir: Path, sources_dir: Path | None) -> dict:
    """Serve the materialized source from a profile: plan, check, up, verify, install."""
    from materialize.serve.up import DEFAULT_SOURCES_DIR

    sources_dir = sources_dir or Path(os.environ.get("MATERIALIZE_SERVE_SOURCES") or DEFAULT_SOURCES_DIR)
    return {"profiles": profiles_dir, "sources": sources_dir.absolute()}


@serve_group.command("plan")
@option("profile")
@manifest_option
@json_option
def plan_cmd(obj: dict, profile: str, output_dir: Path | None, as_json: bool) -> int:
    """Show the argv, environment, mounts and expected banners PROFILE would run with."""
    plan = _prepare(obj, profile, output_dir).plan
    if as_json:
        write(plan.to_json())
        return 0
    write(f"profile {plan.profile}  materialization {plan.materialization_id}  launcher {plan.launcher}")
    write(f"url {plan.url}  model {plan.served_model}  plan {plan.hash()[:16]}")
    from materialize.serve.constraints import PLAN_ENV
    from materialize.serve.launch import PROCESS_ENV_KEEP

    fixed = [*PLAN_ENV, *(["PATH"] if "PATH" in plan.env else [])]
    write(f"environment (flags of enabled patches + profile env + set by the plan: {', '.join(fixed)}):")
    for key, value in plan.env.items():
        write(f"  {key}={value}")
    if plan.launcher == "process":
        write(f"  (the process gets exactly these, plus the caller's {', '.join(PROCESS_ENV_KEEP)}; not the "
              f"caller's PATH, HOME or anything else)")
        write(f"working directory: {plan.workdir}")
    else:
        write(f"working directory: {plan.workdir} (--workdir; not the image's WORKDIR)")
        write(f"entrypoint: {plan.server_argv[0]} (--entrypoint; not the image's ENTRYPOINT)")
    write(f"flags left off: {', '.join(plan.disabled_flags) or 'none'}")
    write("banners that must appear:")
    for b in plan.banners:
        write(f"  {b.flag} ({b.patch}): {b.banner}")
    write(f"mounts ({len(plan.mounts)}):")
    for m in plan.mounts:
        write(f"  {m.source} -> {m.target}{' (ro)' if m.read_only else ''}")
    write("argv:")
    write("  " + " ".join(_shell_word(a) for a in plan.argv))
    for note in plan.notes:
        write(f"note: {note}")
    return 0


@serve_group.command("diff")
@option("profile_a")
@option("profile_b")
@json_option
def diff_cmd(obj: dict, profile_a: str, profile_b: str, as_json: bool) -> int:
    """What differs between the plans of two profiles (exit 1 if anything does, like diff)."""
    from materialize.serve.diff import diff_plans

    a, b = (_prepare(obj, ref).plan.to_dict() for ref in (profile_a, profile_b))
    lines = diff_plans(a, b)
    if as_json:
        write(json.dumps({"a": profile_a, "b": profile_b, "differences": lines}, indent=2))
    else:
        write("\n".join(lines) if lines else "plans are identical")
    return 1 if lines else 0


@serve_group.command("check")
@option("profiles", nargs="*")
@option("--no-materialize", action="store_true", help="check rules only; do not derive full plans")
def check_cmd(obj: dict, profiles: tuple[str, ...], no_materialize: bool) -> int:
    """Validate every profile (or the ones named) on its own defaults; exit 1 on any violation."""
    from materialize.serve.profile import ProfileError

    refs = list(profiles) or sorted(str(p) for p in obj["profiles"].glob("*.yaml"))
    if not refs:
        raise ProfileError(f"no profiles in {obj['profiles']}")
    failed = 0
    for ref in refs:
        try:
            plan = _prepare(obj, ref, materialize=not no_materialize).plan
        except MaterializeError as exc:
            failed += 1
            write(f"FAIL {ref}\n  {exc}")
            continue
        flags = ", ".join(f"{b.flag}" for b in plan.banners) or "no flags"
        write(f"ok   {plan.profile}: materialization {plan.materialization_id or '(not materialized)'}; "
              f"{len(plan.mounts)} mounts; {flags}")
        if plan.materialization_id is None:
            write("  names not checked against the pinned source (no materialization)")
        for u in plan.unverified:
            write(f"  unverified {u['kind']} {u['name']}: {u['source']}")
        for u in plan.unobservable:
            write(f"  unobservable flag {u['flag']} ({u['patch']}): {u['reason']}")
        for g in plan.gates:
            if g.get("max_failure_rate"):
                write(f"  gate {g['name']}: {g['requests']} requests at concurrency {g['concurrency']} "
                      f"(rules out a failure rate of {g['max_failure_rate']} at 95% when all pass)")
    return 1 if failed else 0


@serve_group.command("up")
@option("profile")
@option("--ledger", dest="ledger_dir", type=Path, default=LEDGER_DIR,
        show_default=True, help="run records go to LEDGER/<profile>.jsonl")
@option("--logs", dest="log_dir", type=Path, default=LOG_DIR,
        show_default=True)
@option("--once", action="store_true", help="stop the server after the gates instead of serving on")
def up_cmd(obj: dict, profile: str, ledger_dir: Path, log_dir: Path, once: bool) -> int:
    """Preflight, materialize, launch, require banners, run the gates, record the run."""
    from materialize.series import load_series
    from materialize.serve import preflight
    from materialize.serve.constraints import require_rules
    from materialize.serve.profile import load_profile
    from materialize.serve.up import prepare, serve_up

    path = _profile_path(obj, profile)
    loaded = load_profile(path)
    # 1. the rules (cheap, and a broken profile is the answer whatever the host looks like) ...
    require_rules(loaded, load_series(loaded.series_path))
    # 2. ... then the host ...
    checks = preflight.host_checks(loaded)
    for c in checks:
        write(f"preflight {c.name}: {'ok' if c.ok else 'FAIL'}: {c.detail}")
    preflight.require(checks, Path(path).stem)
    # 3. ... then materialize, plan (the rules again, now against the pinned tree) and launch.
    prep = prepare(path, sources_dir=obj["sources"])
    result = serve_up(prep, log_dir=log_dir, ledger_dir=ledger_dir, echo=write, keep_running=not once)
    write(("ok: " if result.exit_code == 0 else "FAILED: ") + result.reason)
    return result.exit_code


@serve_group.command("verify")
@option("url", nargs="?")
@option("--profile", dest="profile", required=True)
@option("--pid", type=int, help="the running server's pid (process launcher) or the docker CLI's")
@option("--container", help="the running container's name (reads docker inspect)")
@option("--root", dest="unit_root", type=Path,
        help="also check the installed systemd unit under this root (use / for the live system)")
@option("--log", dest="log", type=Path,
        help="the server's output, for the banners (default: the pid's stdout file, docker logs, or the "
                   "unit's log under --root)")
@manifest_option
def verify_cmd(obj: dict, url: str | None, profile: str, pid: int | None, container: str | None,
               unit_root: Path | None, log: Path | None, output_dir: Path | None) -> int:
    """Check the rendered plan against the unit, the running process and live gate requests."""
    from materialize.serve.verify import verify

    if pid is not None and container is not None:
        raise UsageError("give --pid or --container, not both")
    plan = _prepare(obj, profile, output_dir).plan
    checks = verify(plan, url=url, pid=pid, container=container, unit_root=unit_root, log=log)
    for c in checks:
        write(c.line())
    bad = [c for c in checks if not c.ok]
    write(f"{len(checks) - len(bad)}/{len(checks)} checks passed")
    return 1 if bad else 0


@serve_group.command("install")
@option("profile")
@option("--systemd", action="store_true", help="render a systemd unit and environment file (the only target)")
@option("--root", dest="root", type=Path, default=Path("/"),
        show_default=True, help="install under this root (a staging dir, or / on the host)")
@manifest_option
def install_cmd(obj: dict, profile: str, systemd: bool, root: Path, output_dir: Path | None) -> int:
    """Write a durable unit + env file from the plan (no runtime-only overrides)."""
    from materialize.serve.install import install_prepared

    if not systemd:
        raise UsageError("say what to install: --systemd")
    prep = _prepare(obj, profile, output_dir)
    plan = prep.plan
    for path in install_prepared(prep, root):
        write(f"wrote {path}")
    write(f"plan {plan.hash()[:16]}; check it later with: materialize serve verify --profile {plan.profile} "
          f"--root {root}")
    return 0


@serve_group.command("boot-check")
@option("plan_file", type=Path)
@option("--pre", action="store_true", help="before the start: only check that every source the plan needs exists")
@option("--log", dest="log", type=Path, help="this start's server output")
def boot_check_cmd(obj: dict, plan_file: Path, pre: bool, log: Path | None) -> int:
    """Run by the installed unit (ExecStartPre / ExecStartPost): fail the service closed."""
    from materialize.serve.bootcheck import boot_check, check_sources, host_checks, load_plan, shadowing
    from materialize.serve.plan import edited_sources

    if not plan_file.is_file():
        write(f"FAILED: {plan_file} is missing: the unit cannot know what it was installed to serve")
        return 1
    import hashlib

    # The unit names its plan by content (install.plan_path) and reads nothing else at boot: a plan edited
    # there (a banner or a source digest dropped) would relax every later check. Its bytes name it.
    digest = hashlib.sha256(plan_file.read_bytes()).hexdigest()
    if plan_file.name != f"{digest}.json":
        write(f"FAILED: {plan_file} is not the plan it names (its sha256 is {digest[:16]}...; edited after "
              "installing?): run `materialize serve install` again; nothing was checked or started")
        return 1
    plan = load_plan(plan_file)
    if pre:
        host = host_checks(plan)
        for c in host:
            write(f"preflight {c.name}: {'ok' if c.ok else 'FAIL'}: {c.detail}")
        if not all(c.ok for c in host):
            write("FAILED: the host preflight refuses this start (as `serve up` would); nothing was started")
            return 1
        missing = check_sources(plan)
        if missing:
            write(f"FAILED: {len(missing)} source(s) missing (was the content-addressed folder removed?): "
                  + ", ".join(missing[:5]))
            return 1
        edited = edited_sources(plan)
        if edited:
            write(f"FAILED: {len(edited)} source(s) are not what materialization {plan.materialization_id} wrote "
                  "(edited after installing?): " + "; ".join(edited[:5]))
            return 1
        shadows = shadowing(plan)
        if shadows:
            write(f"FAILED: {', '.join(shadows)} in the working directory would shadow the plan's code")
            return 1
        write(f"ok: {len(plan.mounts)} mount source(s) present for materialization {plan.materialization_id}")
        return 0
    result = boot_check(plan, log, echo=write)
    write(("ok: " if result.ok else "FAILED: ") + result.reason)
    return 0 if result.ok else 1


def _shell_word(word: str) -> str:
    import shlex

    return shlex.quote(word)
