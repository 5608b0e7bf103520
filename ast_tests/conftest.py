"""Loads the offline plugin: every test here runs patched (must pass) and control (must fail)."""

import sys

sys.dont_write_bytecode = True  # before anything else is imported from this directory

pytest_plugins = ["materialize.offline.plugin"]
