"""Working on the series: a quilt-style editable workspace over the store, rebase, git round-trips.

Modules, one job each: ``session`` (the door every command goes through: series, lock, state
checks), ``patchtext`` (split a patch file into raw, byte-exact pieces), ``diffgen`` (regenerate a
patch with minimal churn), ``diffscript`` (where lines changed, as git / GNU diff decide),
``mailheader`` (patch descriptions as From/Date/Subject), ``seriesedit`` (round-trip edits of the
series YAML), ``journal`` (resumable / rollback-able operations), ``state`` (the ``work/``
directory), ``trees`` (series trees through the engine), ``stack`` (push/pop/goto), ``edit``
(new/add/refresh/...), ``rebase``, ``gitio`` (export-git / import-git), ``cli`` (the click commands,
``COMMANDS``). The README's "Daily workflow" section is the user's guide.
"""
