#!/bin/sh
# Install linksweep offline from a bundle made by `python scripts/bundle` (docs/offline-bundle.md):
#   sh install-bundle.sh VENV   |   sh install-bundle.sh --target DIR
# PYTHON picks the interpreter (default python3): the node's, the one that has its torch. In the
# bundle folder this runs install_bundle.py beside it; in a checkout, scripts/bundle/install.py
# (then say where the parts are with --bundle DIR).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ -f "$here/install_bundle.py" ]; then
  exec "${PYTHON:-python3}" "$here/install_bundle.py" --bundle "$here" "$@"
fi
exec "${PYTHON:-python3}" "$here/bundle/install.py" "$@"
