"""`python -m orchestrator.emulated up|down|status|check ...` (see `command.main`)."""

import sys

from orchestrator.emulated.command import main

sys.exit(main())
