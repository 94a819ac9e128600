"""``python -m orchestrator.emulated up|down|status|check ...``: ``linksweep cluster ...
--emulated`` without the linksweep CLI, with the same arguments (``commands/cluster.py``).

May import: orchestrator.commands.cluster.
"""

import argparse
import sys

from orchestrator.commands.cluster import add_arguments, main

parser = argparse.ArgumentParser(prog="python -m orchestrator.emulated")
add_arguments(parser)
parser.set_defaults(emulated=True)  # this entry point manages only the emulated cluster
sys.exit(main(parser.parse_args()))
