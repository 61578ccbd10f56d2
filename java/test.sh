#!/usr/bin/env bash
# Runs the Java SDK's tests (java/, examples/java/) against a real router.
# Builds the Go binaries the tests start into .cache/bin first, then runs
# Maven quietly with its own cache (~/.m2); MVN_OFFLINE=1 runs it offline
# once the dependencies are cached. Extra arguments go to Maven. Exit code:
# Maven's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v mvn >/dev/null 2>&1 || { echo "java/test.sh: mvn (Maven 3.8+) is not installed" >&2; exit 1; }
command -v java >/dev/null 2>&1 || { echo "java/test.sh: java (JDK 17+) is not installed" >&2; exit 1; }
mkdir -p .cache/bin
for cmd in router toolbus toolworker; do
	go build -o ".cache/bin/$cmd" "./cmd/$cmd"
done
offline=()
[ "${MVN_OFFLINE:-0}" = 1 ] && offline=(-o)
set +e
# Debian's Maven 3.8 prints bare ANSI resets even with -B -q: they are dropped.
nice -n "${NICE:-10}" mvn -B -q "${offline[@]}" -f java/pom.xml \
	-Dtoolbus.prebuilt=true -Dtoolbus.root="$root" verify "$@" 2>&1 | sed -u 's/\x1b\[0m//g'
code=${PIPESTATUS[0]}
set -e
if [ "$code" = 0 ] && [ -f java/toolbus-core/target/bench.txt ]; then
	cat java/toolbus-core/target/bench.txt
fi
exit "$code"
