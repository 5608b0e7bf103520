"""Bisection across hardware runs: which patch of the series broke a flaky gate or moved a noisy metric.

Modules: ``stats`` (bounds, rank tests), ``posterior`` (culprit posterior, expected-information
choice), ``metric`` (Pinpoint-style metric search), ``state`` (crash-safe persistent state),
``session`` (the state machine), ``validate`` (is a run record evidence?), ``runner`` /
``ray_executor`` (running the user's command), ``report`` / ``plot`` (what the user sees), ``cli``; ``api`` is what other commands may
use.
"""
