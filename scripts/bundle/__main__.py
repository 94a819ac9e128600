"""``python scripts/bundle ...``: run the bundle builder from a checkout (see cli.py)."""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # so `bundle` is a package
    from bundle.cli import main

    sys.exit(main())
