"""The serve plan: argv, environment, mounts and expected banners, derived and deterministic.

plan = profile + manifest + the flags and banners of the enabled patches. Nothing in here is typed by
hand: the environment is the enabled patches' flags (seed 001: a hand-kept ``-e`` list missed one and
the patch never switched on), mounts are the manifest's changed files, banners are the series'. The
same inputs give byte-identical JSON, so two plans can be diffed and a unit can be checked for
staleness by hash.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from materialize.errors import MaterializeError
from materialize.series import Series
from materialize.serve.constraints import (
    BANNER_NONE,
    RULES,
    require_rules,
    resolve_enabled,
    resolved_gates,
    server_env,
)
from materialize.serve.names import SourceIndex, check_names
from materialize.serve.profile import Profile, ProfileError
from materialize.tree import Tree

PLAN_FORMAT = 3  # 2: workdir; docker's --workdir / --entrypoint; a process's PATH and PLAN_ENV in env.
# 3: preflight (the host checks the installed unit's ExecStartPre repeats)

# The server's working directory. ``python -m`` puts it first on sys.path, ahead of the install path the
# patches are mounted over (and of PYTHONPATH), so it is never the caller's (a checkout holding an
# unpatched ``vllm/``) nor the image's WORKDIR (many vLLM images keep a source tree there). A process runs
# in ``/``; a container in a folder no image has, which docker creates empty. PYTHONSAFEPATH=1 (PLAN_ENV)
# keeps it off sys.path altogether on Python >= 3.11.
PROCESS_WORKDIR = "/"
CONTAINER_WORKDIR = "/var/empty/materialize-serve"
# A process launcher's PATH: the interpreter's (virtualenv's) folder, then systemd's default. Never the
# caller's, which decides which tools (compilers, ``ninja``, ``vllm``) the server's subprocesses run.
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class PlanError(MaterializeError):
    """The materialization cannot serve this profile (a patch not applied, a deletion an overlay cannot
    express, a target with no install path)."""

    exit_code = 2


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class Banner:
    patch: str
    flag: str
    banner: str


@dataclass(frozen=True)
class Plan:
    """Everything ``serve up`` will do, as data. ``argv`` is what gets exec'd on this host;
    ``server_argv`` is the server's own command line (the process's argv, or the container's Cmd)."""

    profile: str
    profile_hash: str
    materialization_id: str | None
    series: str
    launcher: str
    container_name: str | None
    image: str | None
    argv: list[str]
    server_argv: list[str]
    env: dict[str, str]
    mounts: list[Mount]
    devices: list[str]
    banners: list[Banner]
    served_model: str
    url: str
    readiness: dict[str, float]
    gates: list[dict[str, Any]]
    stop_timeout_s: int
    workdir: str
    # The host checks of ``serve up`` (``min_mem_available_gb``): the installed unit starts without it, on
    # every boot and restart, so its ExecStartPre repeats them from here (seed 002: a boot below ~4 GB
    # MemAvailable froze the host).
    preflight: dict[str, float] = field(default_factory=dict)
    # Every changed file the plan delivers (host path under ``sources``) -> the git blob id the
    # materialization wrote there. The sources folder is named by the id and served as it is found: the
    # boot check, ``serve up`` and ``verify`` compare, so a file edited there never runs under the id.
    digests: dict[str, str] = field(default_factory=dict)
    docker_args: list[str] = field(default_factory=list)
    disabled_flags: list[str] = field(default_factory=list)
    # Banners of the flag-gated patches the profile left off: one in the server's output means that patch
    # runs, its flag having reached the server from outside the plan (an image's ENV, the manager's env).
    disabled_banners: list[Banner] = field(default_factory=list)
    unobservable: list[dict[str, str]] = field(default_factory=list)
    sources: str | None = None
    unverified: list[dict[str, str]] = field(default_factory=list)
    format: int = PLAN_FORMAT
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """The inverse of ``to_dict`` (what the installed unit's boot check reads back)."""
        if data.get("format") != PLAN_FORMAT:
            raise PlanError(f"plan format {data.get('format')!r} is not {PLAN_FORMAT}; install again")
        fields = dict(data)
        fields["mounts"] = [Mount(**m) for m in data.get("mounts", [])]
        fields["banners"] = [Banner(**b) for b in data.get("banners", [])]
        fields["disabled_banners"] = [Banner(**b) for b in data.get("disabled_banners", [])]
        return cls(**fields)

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, two-space indent, trailing newline. Diffable and hashable."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n"

    def hash(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()


def vllm_args(profile: Profile) -> list[str]:
    """vLLM options in one fixed order; booleans always explicit, so vLLM's defaults never decide."""
    spec = profile.spec
    v = spec.vllm
    args = [
        "--model", spec.model.path,
        "--served-model-name", spec.model.served_name,
        "--host", spec.server.host,
        "--port", str(spec.server.port),
        "--max-model-len", str(v.max_model_len),
        "--tensor-parallel-size", str(v.tensor_parallel_size),
    ]
    if v.block_size is not None:
        args += ["--block-size", str(v.block_size)]
    if v.max_num_seqs is not None:
        args += ["--max-num-seqs", str(v.max_num_seqs)]
    if v.enable_prefix_caching:
        args.append("--enable-prefix-caching")
        if spec.model.hybrid:
            args += ["--mamba-cache-mode", "align"]
        if v.mamba_block_size is not None:
            args += ["--mamba-block-size", str(v.mamba_block_size)]
    else:
        args.append("--no-enable-prefix-caching")
    args.append("--async-scheduling" if v.async_scheduling else "--no-async-scheduling")
    if v.tool_call_parser:
        if v.enable_auto_tool_choice:
            args.append("--enable-auto-tool-choice")
        args += ["--tool-call-parser", v.tool_call_parser]
    tt = spec.tt.model_dump(exclude_defaults=True)
    if tt:
        overrides: dict[str, Any] = {}
        if tt.get("device_argmax"):
            overrides["sample_on_device_mode"] = "all"
        if "trace_mode" in tt:
            overrides["trace_mode"] = tt["trace_mode"]
        args += ["--override-tt-config", json.dumps(overrides, sort_keys=True, separators=(",", ":"))]
    return args + list(v.extra_args)


def mounts_for(series: Series, manifest: dict[str, Any], out_dir: Path) -> list[Mount]:
    """Each changed file of each target, bind-mounted read-only at ``install_path/<file>``."""
    mounts: list[Mount] = []
    for target, info in sorted(manifest.get("targets", {}).items()):
        changed = list(info.get("changed", []))
        deleted = list(info.get("deleted", []))
        if deleted:
            raise PlanError(f"target {target}: the series deletes {', '.join(deleted)}; a bind mount cannot "
                            f"delete a file from the image, so an overlay cannot serve this series")
        if not changed:
            continue
        install = info.get("install_path") or (series.targets[target].install_path if target in series.targets else None)
        if not install:
            raise PlanError(f"{series.path}: target {target} has no install_path; cannot mount its "
                            f"{len(changed)} changed file(s) into the image")
        root = out_dir / target
        for rel in sorted(changed):
            _inside(target, rel, root)
            mounts.append(Mount(source=str(root / rel), target=f"{install.rstrip('/')}/{rel}"))
    return mounts


def _inside(target: str, rel: str, root: Path) -> None:
    """A changed file's path must stay inside its target on both sides of the mount: relative, no
    ``..`` or empty parts, and its source (symlinks resolved) under the output's target folder."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in rel:
        raise PlanError(f"target {target}: changed file {rel!r} is not a plain relative path; a mount of it "
                        "would escape the install path")
    source = (root / rel).resolve()
    if not source.is_relative_to(root.resolve()):
        raise PlanError(f"target {target}: {root / rel} resolves to {source}, outside the output's {target} "
                        "folder; the mount would serve a file the materialization did not write")


def check_output(manifest: dict[str, Any], out_dir: Path, read_blob) -> None:
    """An output read with ``--from-output`` holds, for every changed file, the bytes the store has for
    it in the manifest's tree (``read_blob(tree, path)``): a file edited by hand after materializing
    is refused, not served."""
    from materialize.store import blob_id

    for target, info in sorted(manifest.get("targets", {}).items()):
        for rel in info.get("changed", []):
            _inside(target, rel, out_dir / target)
            path = out_dir / target / rel
            if not path.is_file():
                raise PlanError(f"{path}: listed as changed by materialization {manifest.get('id')} but missing")
            try:
                want = blob_id(read_blob(info["tree"], rel))
            except Exception as exc:  # noqa: BLE001 - any failure to read it means it cannot be verified
                raise PlanError(f"{path}: cannot read {target}:{rel} of tree {info.get('tree')} from the store "
                                f"to verify the output ({exc}); materialize again") from None
            if blob_id(path.read_bytes()) != want:
                raise PlanError(f"{path}: differs from what materialization {manifest.get('id')} wrote "
                                "(edited after materializing?); materialize again")


def check_manifest(manifest: dict[str, Any], computed: dict[str, Any], where: str) -> None:
    """An output read with ``--from-output`` must be what the series materializes to now: its id, and
    every target's tree, base, install path and changed / deleted files, every patch as applied. The
    manifest is a file anyone can edit: trusted as read, an edited ``install_path`` mounts the patches
    beside the code that runs, a ``changed`` list short of one file leaves it unpatched, another
    ``tree`` (with an id recomputed to match) names unpatched code. ``computed`` is the manifest of the
    series materialized now (the engine's cache makes that a lookup), with the same ``overlay``."""
    problems = []
    for key in sorted((set(manifest) | set(computed)) - {"series"}):
        have, want = manifest.get(key), computed.get(key)
        if have == want:
            continue
        if key == "targets" and isinstance(have, dict) and isinstance(want, dict):
            for target in sorted(set(have) | set(want)):
                a, b = have.get(target), want.get(target)
                if not isinstance(a, dict) or not isinstance(b, dict):
                    problems.append(f"target {target} is {'absent' if a is None else 'unexpected'}")
                    continue
                fields = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                problems.append(f"target {target}: {', '.join(fields)} differ")
        elif key == "id":
            problems.append(f"id {have!r} where the series materializes to {want!r}")
        else:
            problems.append(f"{key} differs")
    if problems:
        raise PlanError(f"{where}: not what the series materializes to now ({'; '.join(problems)}): edited after "
                        f"publishing, or an output of other code; materialize again")


def check_full_output(manifest: dict[str, Any], out_dir: Path, list_tree) -> None:
    """A full output put on ``PYTHONPATH`` must hold every file of each target's tree (``list_tree(tree)``
    -> paths), not only the changed ones. A package folder there without its ``__init__.py`` (an overlay
    declared full, a file removed by hand) is a namespace portion the interpreter passes over for the
    installed package of the same name: the patched files beside it would never be imported."""
    for target, info in sorted(manifest.get("targets", {}).items()):
        root = out_dir / target
        try:
            paths = list_tree(info["tree"])
        except Exception as exc:  # noqa: BLE001 - a tree the store cannot list cannot be checked
            raise PlanError(f"{root}: cannot list tree {info.get('tree')} of target {target} from the store to "
                            f"check the output ({exc}); materialize again") from None
        missing = [rel for rel in sorted(paths) if not os.path.lexists(root / rel)]
        if missing:
            shown = ", ".join(f"{target}/{rel}" for rel in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise PlanError(f"{out_dir}: {shown}{more} missing from the full output of materialization "
                            f"{manifest.get('id')} (an overlay, or files removed?): on PYTHONPATH the installed "
                            "package would be imported in their place; materialize again")


def build_plan(
    profile: Profile,
    series: Series,
    manifest: dict[str, Any] | None,
    out_dir: Path | None,
    plugin_tree: Tree | None = None,
    index: SourceIndex | None = None,
) -> Plan:
    """Derive the plan; refuses (fail closed) on any rule violation or manifest mismatch."""
    require_rules(profile, series, plugin_tree)
    enabled, _ = resolve_enabled(profile, series)
    spec = profile.spec
    env = server_env(profile, enabled)
    notes: list[str] = []

    if manifest is not None:
        applied = {p["name"]: p for p in manifest.get("patches", [])}
        for patch in enabled:
            got = applied.get(patch.name)
            if got is None:
                raise PlanError(f"{profile.where('enable')}: patch {patch.name} is enabled but the "
                                f"materialization {manifest.get('id')} does not contain it")
            if got.get("sha256") and got["sha256"] != patch.sha256():
                raise PlanError(f"patch {patch.name}: {patch.path} changed since materialization "
                                f"{manifest.get('id')}; materialize again")
        same_series(series, manifest)

    mounts: list[Mount] = []
    launcher = spec.launcher
    if launcher.sources == "mounts":
        if manifest is None or out_dir is None:
            notes.append("no materialization given: mounts not derived")
        else:
            mounts = mounts_for(series, manifest, out_dir)
    elif launcher.sources == "pythonpath":
        if manifest is None or out_dir is None:
            notes.append("no materialization given: PYTHONPATH not derived")
        else:
            if manifest.get("overlay"):
                raise PlanError(f"{profile.where('launcher', 'sources')}: sources: pythonpath needs a full "
                                f"output; an overlay holds only the changed files")
            env["PYTHONPATH"] = ":".join(str(out_dir / t) for t in sorted(manifest.get("targets", {})))
    if launcher.kind == "process":
        # launcher-command-known: command[0] is an absolute path here
        env["PATH"] = f"{Path(launcher.command[0]).parent}:{SAFE_PATH}"
    env = dict(sorted(env.items()))

    server_argv = list(launcher.command) + vllm_args(profile)
    unverified: list[dict[str, str]] = []
    if index is not None:
        rule_env = {k[4:]: r.id for r in RULES for k in (*r.when, *r.require) if k.startswith("env.")}
        problems, unverified = check_names(profile, vllm_args(profile), env, index, rule_env)
        if problems:
            raise ProfileError("names the pinned source does not have (issue 14.9):\n  " + "\n  ".join(problems))
    container = None
    if launcher.kind == "docker":
        container = launcher.container_name or f"materialize-serve-{profile.name}"
        workdir = CONTAINER_WORKDIR
        argv = docker_run_argv(container, launcher.image or "", env, mounts, spec.devices,
                               launcher.docker_args, server_argv, workdir)
    else:
        workdir = PROCESS_WORKDIR
        argv = list(server_argv)

    plan = Plan(
        profile=profile.name,
        profile_hash=profile.hash(),
        materialization_id=None if manifest is None else manifest.get("id"),
        series=str(series.path),
        launcher=launcher.kind,
        container_name=container,
        image=launcher.image,
        argv=argv,
        server_argv=server_argv,
        env=env,
        mounts=mounts,
        devices=list(spec.devices),
        banners=[Banner(patch=p.name, flag=p.flag or "", banner=p.banner) for p in enabled
                 if p.banner and p.banner != BANNER_NONE],
        served_model=spec.model.served_name,
        url=f"http://{_connect_host(spec.server.host)}:{spec.server.port}",
        readiness=spec.readiness.model_dump(),
        gates=resolved_gates(profile),
        stop_timeout_s=launcher.stop_timeout_s,
        workdir=workdir,
        preflight=spec.preflight.model_dump(),
        digests=source_digests(manifest, out_dir, index) if manifest is not None and out_dir is not None else {},
        docker_args=list(launcher.docker_args),
        unverified=unverified,
        sources=str(out_dir) if (mounts or "PYTHONPATH" in env) and out_dir is not None else None,
        disabled_flags=sorted({p.flag for p in series.patches if p.flag and p not in enabled}),
        disabled_banners=[Banner(patch=p.name, flag=p.flag, banner=p.banner) for p in series.patches
                          if p.flag and p not in enabled and p.banner and p.banner != BANNER_NONE],
        unobservable=[{"flag": p.flag or "", "patch": p.name, "reason": p.spec.banner_none_why or ""}
                      for p in enabled if p.banner == BANNER_NONE],
        notes=notes + [f"{p.name}: flag {p.flag} declares banner: none ({p.spec.banner_none_why}); its engagement "
                       f"cannot be observed and the run record says so" for p in enabled if p.banner == BANNER_NONE],
    )
    require_delivered(plan, manifest if out_dir is not None else None, series)
    return plan


def source_digests(manifest: dict[str, Any], out_dir: Path, index: SourceIndex | None) -> dict[str, str]:
    """``out_dir/<target>/<file>`` -> git blob id, for every changed file of the materialization, read
    from the store's trees (the materialization itself, not the output folder, which may not exist yet)."""
    if index is None:
        return {}
    digests = {}
    for target, info in sorted(manifest.get("targets", {}).items()):
        for rel in sorted(info.get("changed", [])):
            entry = index.store.lookup(info["tree"], rel)
            if entry is None:
                raise PlanError(f"target {target}: {rel} is listed as changed by materialization {manifest.get('id')} "
                                f"but its tree {info['tree']} has no such file; materialize again")
            digests[str(out_dir / target / rel)] = entry.sha
    return digests


def edited_sources(plan: Plan, root: Path = Path("/")) -> list[str]:
    """Sources of the plan (under ``root``) missing, or holding other bytes than the materialization wrote
    (``plan.digests``). A plan that delivers sources without digests cannot be checked: that fails too."""
    from materialize.store import blob_id

    problems = []
    if plan.sources and (plan.mounts or "PYTHONPATH" in plan.env) and not plan.digests:
        problems.append(f"{plan.sources}: the plan carries no digests of its sources (plan again)")
    for path, want in sorted(plan.digests.items()):
        here = root / path.lstrip("/")
        try:
            data = here.read_bytes()
        except OSError:
            problems.append(f"{path}: missing")
            continue
        if blob_id(data) != want:
            problems.append(f"{path}: edited since materialization {plan.materialization_id} (blob {blob_id(data)[:12]}, "
                            f"the materialization wrote {want[:12]})")
    return problems


def undelivered(plan: Plan, manifest: dict[str, Any] | None, series: Series) -> list[str]:
    """``target:file`` of every changed file of the materialization the plan does not bring to the
    server (a mount at its install path, or its target folder on PYTHONPATH). What is listed here would
    run unpatched under the materialization's id."""
    if not manifest:
        return []
    mounted = {m.target for m in plan.mounts} if plan.launcher == "docker" else set()
    path = set(filter(None, plan.env.get("PYTHONPATH", "").split(":"))) if plan.launcher == "process" else set()
    missing = []
    for target, info in sorted(manifest.get("targets", {}).items()):
        install = info.get("install_path") or (series.targets[target].install_path if target in series.targets else "")
        on_path = plan.sources is not None and str(Path(plan.sources) / target) in path
        for rel in sorted(info.get("changed", [])):
            if not on_path and f"{(install or '').rstrip('/')}/{rel}" not in mounted:
                missing.append(f"{target}:{rel}")
    return missing


def require_delivered(plan: Plan, manifest: dict[str, Any] | None, series: Series) -> None:
    """Refuse a plan that carries a materialization id whose changed files it does not deliver."""
    missing = undelivered(plan, manifest, series)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise PlanError(f"profile {plan.profile}: the plan does not deliver {len(missing)} changed file(s) of "
                        f"materialization {plan.materialization_id} ({shown}); they would run unpatched under "
                        f"that id. Plan again with sources: mounts (docker) or pythonpath (process)")


def same_series(series: Series, manifest: dict[str, Any]) -> None:
    """The manifest must be the materialization of the whole series as it stands: every patch, in order,
    with the sha256 its file has now, and the same targets. Checking only the enabled patches would
    let ``--from-output`` serve a stale output (an always-on patch edited, added or dropped since)."""
    where = f"materialization {manifest.get('id')} ({manifest.get('series')})"
    have = [(p.get("name"), p.get("sha256")) for p in manifest.get("patches", [])]
    want = [(p.name, p.sha256()) for p in series.patches]
    problems = []
    if manifest.get("position") != len(series.patches):
        problems.append(f"it stops at position {manifest.get('position')} of {len(series.patches)}")
    if have != want:
        names_have, names_want = [n for n, _ in have], [n for n, _ in want]
        if names_have != names_want:
            problems.append(f"its patches are {', '.join(map(str, names_have)) or 'none'}; "
                            f"the series has {', '.join(names_want) or 'none'}")
        else:
            edited = [n for (n, a), (_, b) in zip(have, want, strict=True) if a != b]
            problems.append(f"{', '.join(map(str, edited))} changed since (sha256)")
    if set(manifest.get("targets", {})) != set(series.targets):
        problems.append(f"its targets are {', '.join(sorted(manifest.get('targets', {})))}; "
                        f"the series has {', '.join(sorted(series.targets))}")
    if problems:
        raise PlanError(f"{where} is not the series as it stands ({series.path}): {'; '.join(problems)}; "
                        "materialize again")


def docker_run_argv(
    name: str,
    image: str,
    env: dict[str, str],
    mounts: list[Mount],
    devices: list[str],
    docker_args: list[str],
    server_argv: list[str],
    workdir: str,
) -> list[str]:
    """``docker run`` in the foreground (the supervisor owns the lifetime), every value explicit. The
    image's WORKDIR and ENTRYPOINT do not decide: ``--workdir`` is the plan's, and ``--entrypoint`` is the
    server command's first word with the rest after the image, so what docker execs (Entrypoint + Cmd)
    is exactly ``server_argv`` (an image entrypoint would otherwise wrap it, with its own grammar)."""
    argv = ["docker", "run", "--rm", "--name", name, "--init", "--workdir", workdir, "--entrypoint", server_argv[0]]
    for device in devices:
        argv += ["--device", device]
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    for m in mounts:
        argv += ["-v", f"{m.source}:{m.target}{':ro' if m.read_only else ''}"]
    return argv + list(docker_args) + [image] + list(server_argv[1:])


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
