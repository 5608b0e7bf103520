"""Allow ``python -m materialize`` as an alias of the console script."""

from materialize.cli import main

raise SystemExit(main())
