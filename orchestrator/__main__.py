"""`python -m orchestrator ...` is the same as the `linksweep` console script (needed by `ray job submit`).

May import: cli.
"""

import sys

from orchestrator.cli import main

sys.exit(main())
