#!/usr/bin/env bash
# What tests/checks/test_mlflow.py needs: linksweep's `mlflow` extra (pyproject.toml: MLflow's
# client, mlflow-skinny, with sqlalchemy and alembic for its SQLite store) in .venv. The test
# runs MLflow's SQLite store in its own temporary folder: no server, nothing left running.
# Idempotent: skipped when the extra is there. Fails when the install breaks what .venv had.
set -euo pipefail
cd "$(dirname "$0")/../.."
have() {
  .venv/bin/python - <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
try:
    major, minor = (int(x) for x in version("mlflow-skinny").split(".")[:2])
    version("sqlalchemy"), version("alembic")
except (PackageNotFoundError, ValueError):
    sys.exit(1)
sys.exit(0 if (major, minor) >= (3, 18) else 1)
PY
}
if have; then
  exit 0
fi
.venv/bin/python -m pip install -q -e '.[mlflow]'
broken=$(.venv/bin/python -m pip check 2>&1 | grep -iE 'mlflow|sqlalchemy|alembic' || true)
if [ -n "$broken" ]; then
  echo "mlflow.sh: the mlflow extra left .venv inconsistent:" >&2
  echo "$broken" >&2
  exit 1
fi
.venv/bin/python -c "import mlflow; print('mlflow', mlflow.__version__)"
