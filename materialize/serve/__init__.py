"""Serve the materialized source: profiles, rules, a derived plan, launchers, gates, verification.

Flow (one direction): profile + series + manifest -> plan (argv, env, mounts, banners) -> preflight ->
launch -> readiness + banners -> gates -> run record. Each step is its own module; ``cli`` only wires.
"""
