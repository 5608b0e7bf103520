"""Working on the series: a quilt-style editable workspace over the store, rebase, git round-trips.

Modules, one job each: ``patchtext`` (split a patch file into raw, byte-exact pieces), ``diffgen``
(regenerate a patch with minimal churn), ``mailheader`` (patch descriptions as From/Date/Subject),
``seriesedit`` (round-trip edits of the series YAML), ``journal`` (resumable / rollback-able
operations), ``state`` (the ``work/`` directory), ``trees`` (series trees through the engine),
``stack`` (push/pop/goto), ``edit`` (new/add/refresh/...), ``rebase``, ``gitio`` (export-git /
import-git), ``cli`` (the click commands, ``COMMANDS``). ``WORKFLOW.md`` is the README section.
"""
