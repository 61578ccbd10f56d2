#!/usr/bin/env bash
# Runs the Python SDK's tests against a real router built from this repository.
# Creates .cache/venv at the repository root if missing, installs ./python[agentscope]
# and the test tools pinned by python/constraints.txt, builds the Go binaries into
# .cache/bin, checks the core package with mypy --strict (a failure stops here), then runs pytest.
# The exit code is pytest's. Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="$root/.cache/venv"
if [ ! -x "$venv/bin/python" ]; then
  py="${PYTHON:-}"
  if [ -z "$py" ]; then  # the first Python 3.10 or later on PATH
    for cand in python3 python3.13 python3.12 python3.11 python3.10; do
      if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
        py="$cand"
        break
      fi
    done
  fi
  if [ -z "$py" ]; then
    echo "python/test.sh: no Python 3.10 or later on PATH (set PYTHON=...)" >&2
    exit 1
  fi
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -c python/constraints.txt \
  -e "./python[agentscope,pydantic,test]"
mkdir -p .cache/bin
for cmd in router toolbus toolworker; do
  go build -o ".cache/bin/$cmd" "./cmd/$cmd"
done
# docs/python.md promises mypy --strict on the core package (the agentscope adapter types against agentscope's Any)
"$venv/bin/python" -m mypy --strict --no-error-summary --cache-dir .cache/mypy --exclude python/src/toolbus/agentscope/ python/src/toolbus
export TOOLBUS_SKIP_BUILD=1
set +e
"$venv/bin/python" -m pytest -q python/tests "$@"
status=$?
set -e
exit $status
