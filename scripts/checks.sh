#!/usr/bin/env bash
# The checks against real programs the suite leaves out (tests/checks; tests/conftest.py says
# why): each NAME has scripts/checks/NAME.sh, which installs what it needs (apt, pip extras),
# and tests/checks/test_NAME.py. Run after scripts/setup.sh, as root:
#   bash scripts/checks.sh              # every check
#   bash scripts/checks.sh slurm mlflow # only these
# .ci/run runs every check after the suite. Each check's cost is in docs/development.md.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -eq 0 ]; then
  set -- $(ls scripts/checks/*.sh 2>/dev/null | xargs -rn1 basename | sed 's/\.sh$//')
fi
files=()
for name in "$@"; do
  if [ ! -f "scripts/checks/$name.sh" ] || [ ! -f "tests/checks/test_$name.py" ]; then
    echo "checks.sh: no check '$name' (have: $(ls scripts/checks | sed 's/\.sh$//' | tr '\n' ' '))" >&2
    exit 2
  fi
  start=$(date +%s)
  bash "scripts/checks/$name.sh"
  echo "checks.sh: $name installed in $(( $(date +%s) - start )) s"
  files+=("tests/checks/test_$name.py")
done
[ "${#files[@]}" -eq 0 ] && { echo "checks.sh: no checks" >&2; exit 0; }
LINKSWEEP_CHECKS=1 .venv/bin/python -m pytest -q -n 0 "${files[@]}"
