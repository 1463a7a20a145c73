#!/usr/bin/env bash
# Install what the tests need and run all of them: lint, types, then the whole pytest suite.
# The virtual environment lives outside the repository (cached between runs); set
# AUTOTUNER_VENV to put it elsewhere. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${AUTOTUNER_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/spec-autotuner/venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]' 2> >(grep -v 'is ignored: it is neither' >&2)
./scripts/ensure-tools.sh
"$venv/bin/ruff" check .
"$venv/bin/mypy"
# The docs site, warnings as errors, into a scratch folder (the reference pages' freshness and
# every link are tests in tests/docs/).
site="$(mktemp -d)"
NO_MKDOCS_2_WARNING=1 "$venv/bin/mkdocs" build --strict --quiet --site-dir "$site"
rm -rf "$site"
# One worker per core (at most 4): the real-vLLM tier stays on one, the rest is shared out test
# by test (tests/conftest.py). `-n 0` among the extra arguments runs everything in one process.
exec "$venv/bin/python" -m pytest --numprocesses auto --maxprocesses 4 "$@"
