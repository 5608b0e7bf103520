"""Dispatching bisect runs to a fleet of Tenstorrent hosts through Ray (optional: ``pip install ray``).

Each host is a Ray custom resource ``tt_host_<name>`` with capacity 1 (start each node with
``ray start --resources '{"tt_host_cfx-llm2": 1}'``), so Ray, not this tool, guarantees one run per
card set at a time and retries nothing behind our back. A task pinned to slot ``i`` runs on host
``hosts[i]`` with ``TT_HOST`` set and ``{host}`` substituted in the command; the materialized directory must be visible there (shared
filesystem or the same path synced), as it is for the local executor.

Without a cluster address (``RAY_ADDRESS``), a local Ray instance is started that declares the host
resources itself: handy to try a fleet template on one machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import replace

from materialize.bisect.runner import Task, TaskResult, run_task
from materialize.bisect.state import BisectError


def resource_name(host: str) -> str:
    return f"tt_host_{host}"


class RayExecutor:
    """Executor protocol over Ray tasks, one custom resource per host."""

    def __init__(self, hosts: Sequence[str], address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise BisectError(
                "--ray-hosts needs the 'ray' package (pip install 'materialize[fleet]')"
            ) from None
        if not hosts:
            raise BisectError("--ray-hosts needs at least one host")
        self.ray = ray
        self.hosts = list(hosts)
        self.jobs = len(self.hosts)
        if not ray.is_initialized():
            address = address or os.environ.get("RAY_ADDRESS")
            if address:
                ray.init(address=address)
            else:
                ray.init(
                    num_cpus=max(2, self.jobs),
                    resources={resource_name(h): 1 for h in self.hosts},
                    include_dashboard=False,
                    log_to_driver=False,
                )
        self._remote = ray.remote(num_cpus=0)(run_task)

    def run(self, tasks: Sequence[Task]) -> Iterator[TaskResult]:
        refs = []
        for task in tasks:
            host = self.hosts[task.slot % self.jobs]
            argv = [a.replace("{host}", host) for a in task.argv]
            pinned = replace(task, argv=argv, env={**task.env, "TT_HOST": host})
            refs.append(self._remote.options(resources={resource_name(host): 1}).remote(pinned))
        pending = list(refs)
        while pending:
            done, pending = self.ray.wait(pending, num_returns=1)
            for ref in done:
                yield self.ray.get(ref)
