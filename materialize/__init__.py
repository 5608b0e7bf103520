"""materialize: a quilt-like patch series over pinned upstream trees.

Apply the series exactly (``materialize apply``), validate each patch offline, serve the result,
and bisect across hardware runs. See docs/ARCHITECTURE.md for the shape of the package.
"""

__version__ = "0.1.0"
