"""`python -m orchestrator ...` is the same as the `linksweep` console script (needed by `ray job submit`)."""

import sys

from orchestrator.cli import main

sys.exit(main())
