#!/usr/bin/env bash
# Runs the Python SDK's tests against a real router built from this repository.
# Creates .cache/venv at the repository root if missing, installs ./python[agentscope]
# and the test tools pinned by python/constraints.txt, builds the Go binaries into
# .cache/bin, then runs pytest. The exit code is pytest's. Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="$root/.cache/venv"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -c python/constraints.txt \
  -e "./python[agentscope,pydantic,test]"
mkdir -p .cache/bin
for cmd in router toolbus toolworker; do
  go build -o ".cache/bin/$cmd" "./cmd/$cmd"
done
export TOOLBUS_SKIP_BUILD=1
set +e
"$venv/bin/python" -m pytest -q python/tests "$@"
status=$?
set -e
exit $status
