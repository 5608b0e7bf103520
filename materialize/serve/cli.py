"""``materialize serve ...``: wiring only; every command returns an exit code.

Register with ``cli.add_command(serve_group)`` (the object is ``materialize.serve.cli:serve_group``).
User errors are ``MaterializeError``s, turned into one line by the top-level handler.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from materialize.errors import MaterializeError

PROFILES_DIR = Path("serve/profiles")
LEDGER_DIR = Path("bench/runs")
LOG_DIR = Path("build/serve/logs")

json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output on stdout")
manifest_option = click.option("--from-output", "output_dir", type=click.Path(path_type=Path, file_okay=False),
                               help="plan from an existing materialized output (its manifest.json) instead of "
                                    "materializing now")


def _profile_path(ctx: click.Context, ref: str) -> Path:
    from materialize.serve.profile import find_profile

    return find_profile(ref, ctx.obj["profiles"])


def _prepare(ctx: click.Context, ref: str, output_dir: Path | None = None, materialize: bool = True):
    """Plan a profile. Writes nothing: no output is published and ``latest`` is never repointed."""
    from materialize.serve.up import prepare

    return prepare(_profile_path(ctx, ref), materialize=materialize, manifest_dir=output_dir,
                   sources_dir=ctx.obj["sources"])


@click.group("serve")
@click.option("--profiles", "profiles_dir", type=click.Path(path_type=Path, file_okay=False), default=PROFILES_DIR,
              show_default=True, help="directory of serving profiles")
@click.option("--sources-dir", "sources_dir", type=click.Path(path_type=Path, file_okay=False),
              envvar="MATERIALIZE_SERVE_SOURCES", default=None,
              help="durable, content-addressed home of served sources (default /var/lib/materialize/serve/"
                   "sources; env MATERIALIZE_SERVE_SOURCES); `materialize gc` never touches it")
@click.pass_context
def serve_group(ctx: click.Context, profiles_dir: Path, sources_dir: Path | None) -> None:
    """Serve the materialized source from a profile: plan, check, up, verify, install."""
    from materialize.serve.up import DEFAULT_SOURCES_DIR

    ctx.obj = {"profiles": profiles_dir, "sources": (sources_dir or DEFAULT_SOURCES_DIR).absolute()}


@serve_group.command("plan")
@click.argument("profile")
@manifest_option
@json_option
@click.pass_context
def plan_cmd(ctx: click.Context, profile: str, output_dir: Path | None, as_json: bool) -> int:
    """Show the argv, environment, mounts and expected banners PROFILE would run with."""
    plan = _prepare(ctx, profile, output_dir).plan
    if as_json:
        click.echo(plan.to_json(), nl=False)
        return 0
    click.echo(f"profile {plan.profile}  materialization {plan.materialization_id}  launcher {plan.launcher}")
    click.echo(f"url {plan.url}  model {plan.served_model}  plan {plan.hash()[:16]}")
    click.echo("environment (flags of enabled patches + profile env):")
    for key, value in plan.env.items():
        click.echo(f"  {key}={value}")
    click.echo(f"flags left off: {', '.join(plan.disabled_flags) or 'none'}")
    click.echo("banners that must appear:")
    for b in plan.banners:
        click.echo(f"  {b.flag} ({b.patch}): {b.banner}")
    click.echo(f"mounts ({len(plan.mounts)}):")
    for m in plan.mounts:
        click.echo(f"  {m.source} -> {m.target}{' (ro)' if m.read_only else ''}")
    click.echo("argv:")
    click.echo("  " + " ".join(_shell_word(a) for a in plan.argv))
    for note in plan.notes:
        click.echo(f"note: {note}")
    return 0


@serve_group.command("diff")
@click.argument("profile_a")
@click.argument("profile_b")
@json_option
@click.pass_context
def diff_cmd(ctx: click.Context, profile_a: str, profile_b: str, as_json: bool) -> int:
    """What differs between the plans of two profiles (exit 1 if anything does, like diff)."""
    from materialize.serve.diff import diff_plans

    a, b = (_prepare(ctx, ref).plan.to_dict() for ref in (profile_a, profile_b))
    lines = diff_plans(a, b)
    if as_json:
        click.echo(json.dumps({"a": profile_a, "b": profile_b, "differences": lines}, indent=2))
    else:
        click.echo("\n".join(lines) if lines else "plans are identical")
    return 1 if lines else 0


@serve_group.command("check")
@click.argument("profiles", nargs=-1)
@click.option("--no-materialize", is_flag=True, help="check rules only; do not derive full plans")
@click.pass_context
def check_cmd(ctx: click.Context, profiles: tuple[str, ...], no_materialize: bool) -> int:
    """Validate every profile (or the ones named) on its own defaults; exit 1 on any violation."""
    from materialize.serve.profile import ProfileError

    refs = list(profiles) or sorted(str(p) for p in ctx.obj["profiles"].glob("*.yaml"))
    if not refs:
        raise ProfileError(f"no profiles in {ctx.obj['profiles']}")
    failed = 0
    for ref in refs:
        try:
            plan = _prepare(ctx, ref, materialize=not no_materialize).plan
        except MaterializeError as exc:
            failed += 1
            click.echo(f"FAIL {ref}\n  {exc}")
            continue
        flags = ", ".join(f"{b.flag}" for b in plan.banners) or "no flags"
        click.echo(f"ok   {plan.profile}: materialization {plan.materialization_id or '(not materialized)'}; "
                   f"{len(plan.mounts)} mounts; {flags}")
        if plan.materialization_id is None:
            click.echo("  names not checked against the pinned source (no materialization)")
        for u in plan.unverified:
            click.echo(f"  unverified {u['kind']} {u['name']}: {u['source']}")
        for u in plan.unobservable:
            click.echo(f"  unobservable flag {u['flag']} ({u['patch']}): {u['reason']}")
        for g in plan.gates:
            if g.get("max_failure_rate"):
                click.echo(f"  gate {g['name']}: {g['requests']} requests at concurrency {g['concurrency']} "
                           f"(rules out a failure rate of {g['max_failure_rate']} at 95% when all pass)")
    return 1 if failed else 0


@serve_group.command("up")
@click.argument("profile")
@click.option("--ledger", "ledger_dir", type=click.Path(path_type=Path, file_okay=False), default=LEDGER_DIR,
              show_default=True, help="run records go to LEDGER/<profile>.jsonl")
@click.option("--logs", "log_dir", type=click.Path(path_type=Path, file_okay=False), default=LOG_DIR,
              show_default=True)
@click.option("--once", is_flag=True, help="stop the server after the gates instead of serving on")
@click.pass_context
def up_cmd(ctx: click.Context, profile: str, ledger_dir: Path, log_dir: Path, once: bool) -> int:
    """Preflight, materialize, launch, require banners, run the gates, record the run."""
    from materialize.series import load_series
    from materialize.serve import preflight
    from materialize.serve.constraints import require_rules
    from materialize.serve.profile import load_profile
    from materialize.serve.up import prepare, serve_up

    path = _profile_path(ctx, profile)
    loaded = load_profile(path)
    # 1. the rules (cheap, and a broken profile is the answer whatever the host looks like) ...
    require_rules(loaded, load_series(loaded.series_path))
    # 2. ... then the host ...
    checks = preflight.host_checks(loaded)
    for c in checks:
        click.echo(f"preflight {c.name}: {'ok' if c.ok else 'FAIL'}: {c.detail}")
    preflight.require(checks, Path(path).stem)
    # 3. ... then materialize, plan (the rules again, now against the pinned tree) and launch.
    prep = prepare(path, sources_dir=ctx.obj["sources"])
    result = serve_up(prep, log_dir=log_dir, ledger_dir=ledger_dir, echo=click.echo, keep_running=not once)
    click.echo(("ok: " if result.exit_code == 0 else "FAILED: ") + result.reason)
    return result.exit_code


@serve_group.command("verify")
@click.argument("url", required=False)
@click.option("--profile", "profile", required=True)
@click.option("--pid", type=int, help="the running server's pid (process launcher) or the docker CLI's")
@click.option("--container", help="the running container's name (reads docker inspect)")
@click.option("--root", "unit_root", type=click.Path(path_type=Path, file_okay=False),
              help="also check the installed systemd unit under this root (use / for the live system)")
@click.option("--log", "log", type=click.Path(path_type=Path, dir_okay=False),
              help="the server's output, for the banners (default: the pid's stdout file, docker logs, or the "
                   "unit's log under --root)")
@manifest_option
@click.pass_context
def verify_cmd(ctx: click.Context, url: str | None, profile: str, pid: int | None, container: str | None,
               unit_root: Path | None, log: Path | None, output_dir: Path | None) -> int:
    """Check the rendered plan against the unit, the running process and live gate requests."""
    from materialize.serve.verify import verify

    if pid is not None and container is not None:
        raise click.UsageError("give --pid or --container, not both")
    plan = _prepare(ctx, profile, output_dir).plan
    checks = verify(plan, url=url, pid=pid, container=container, unit_root=unit_root, log=log)
    for c in checks:
        click.echo(c.line())
    bad = [c for c in checks if not c.ok]
    click.echo(f"{len(checks) - len(bad)}/{len(checks)} checks passed")
    return 1 if bad else 0


@serve_group.command("install")
@click.argument("profile")
@click.option("--systemd", is_flag=True, help="render a systemd unit and environment file (the only target)")
@click.option("--root", "root", type=click.Path(path_type=Path, file_okay=False), default=Path("/"),
              show_default=True, help="install under this root (a staging dir, or / on the host)")
@manifest_option
@click.pass_context
def install_cmd(ctx: click.Context, profile: str, systemd: bool, root: Path, output_dir: Path | None) -> int:
    """Write a durable unit + env file from the plan (no runtime-only overrides)."""
    from materialize.serve.install import install_prepared

    if not systemd:
        raise click.UsageError("say what to install: --systemd")
    prep = _prepare(ctx, profile, output_dir)
    plan = prep.plan
    for path in install_prepared(prep, root):
        click.echo(f"wrote {path}")
    click.echo(f"plan {plan.hash()[:16]}; check it later with: materialize serve verify --profile {plan.profile} "
               f"--root {root}")
    return 0


@serve_group.command("boot-check")
@click.argument("plan_file", type=click.Path(path_type=Path, dir_okay=False, exists=False))
@click.option("--pre", is_flag=True, help="before the start: only check that every source the plan needs exists")
@click.option("--log", "log", type=click.Path(path_type=Path, dir_okay=False), help="this start's server output")
def boot_check_cmd(plan_file: Path, pre: bool, log: Path | None) -> int:
    """Run by the installed unit (ExecStartPre / ExecStartPost): fail the service closed."""
    from materialize.serve.bootcheck import boot_check, check_sources, load_plan

    if not plan_file.is_file():
        click.echo(f"FAILED: {plan_file} is missing: the unit cannot know what it was installed to serve")
        return 1
    plan = load_plan(plan_file)
    if pre:
        missing = check_sources(plan)
        if missing:
            click.echo(f"FAILED: {len(missing)} source(s) missing (was the content-addressed folder removed?): "
                       + ", ".join(missing[:5]))
            return 1
        click.echo(f"ok: {len(plan.mounts)} mount source(s) present for materialization {plan.materialization_id}")
        return 0
    result = boot_check(plan, log, echo=click.echo)
    click.echo(("ok: " if result.ok else "FAILED: ") + result.reason)
    return 0 if result.ok else 1


def _shell_word(word: str) -> str:
    import shlex

    return shlex.quote(word)
