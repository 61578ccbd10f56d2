#!/bin/sh
# Print the commits since the latest tag (or the last 30) as a markdown list.
set -eu
if ! git rev-parse --git-dir >/dev/null 2>&1; then
	echo "not a git repository: run this from the checkout's base directory" >&2
	exit 2
fi
if tag=$(git describe --tags --abbrev=0 2>/dev/null); then
	echo "Changes since $tag:"
	git log --no-merges --format='- %s (%h)' "$tag..HEAD"
else
	echo "Last 30 changes:"
	git log --no-merges --format='- %s (%h)' -30
fi
