#!/bin/sh
# The one way the product's process starts: `npm start` runs `sh scripts/start.sh start`, and the image
# (infra/Dockerfile) has it as its ENTRYPOINT, so `docker run IMAGE service gateway` and the k8s manifests' args
# (`service <name>`) pass through here too. docs/tuning.md explains each value; docs/decisions/0101-memory-settings.md
# has the measurements.
#
# Fixed here, for every deployment (read by glibc when the process starts, not crowdplay settings):
#   MALLOC_ARENA_MAX=2             glibc's malloc arenas: two instead of eight per core
#   MALLOC_MMAP_THRESHOLD_=1048576 glibc's mmap threshold: blocks of 1 MiB and more (board canvases) mapped on their own
# A value already in the environment is left as it is (they are glibc's own variables, read as glibc reads them).
#
# The one setting applied here (libs/config "process tuning"; the others are applied inside the process):
#   SEMI_SPACE_MB  V8's young-generation semi-space (node --max-semi-space-size), default 4, 1–1024. Read as libs/config
#                  reads an integer (surrounding spaces and `_` allowed: 0_8), passed on as plain decimal digits; any
#                  other value is refused here, before node starts.
#
# `exec` keeps the process id: what is started (and signalled, pinned, measured) is node itself.
# CROWDPLAY_BUNDLE (default dist/crowdplay.js beside this script) and CROWDPLAY_NODE (default node) are for the load
# scenarios, which build the bundle elsewhere and run under a given node; CROWDPLAY_NODE_ARGS (default none), node
# options split at spaces and put before the script, for the local cluster's children (`--import tsx` to run the
# sources, a profiler's flags), which start here as every deployed process does.
set -eu

export MALLOC_ARENA_MAX="${MALLOC_ARENA_MAX:-2}"
export MALLOC_MMAP_THRESHOLD_="${MALLOC_MMAP_THRESHOLD_:-1048576}"

semi="${SEMI_SPACE_MB:-4}"
check() { # name value min max: prints the value as plain decimal digits, or refuses it (exit 2)
  v=$(printf '%s' "$2" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e 's/_//g')
  case "$v" in '' | *[!0-9]*) echo "crowdplay: $1 must be a whole number $3–$4, got \"$2\"" >&2; exit 2 ;; esac
  while [ "${#v}" -gt 1 ] && [ "${v#0}" != "$v" ]; do v="${v#0}"; done
  if [ "${#v}" -gt "${#4}" ] || [ "$v" -lt "$3" ] || [ "$v" -gt "$4" ]; then echo "crowdplay: $1 must be a whole number $3–$4, got \"$2\"" >&2; exit 2; fi
  printf '%s' "$v"
}
semi=$(check SEMI_SPACE_MB "$semi" 1 1024) || exit 2
export SEMI_SPACE_MB="$semi"

bundle="${CROWDPLAY_BUNDLE:-$(dirname "$0")/../dist/crowdplay.js}"
# Split at spaces on purpose, never expanded as file patterns.
set -f
# shellcheck disable=SC2086
exec "${CROWDPLAY_NODE:-node}" ${CROWDPLAY_NODE_ARGS:-} --max-semi-space-size="$semi" "$bundle" "$@"
