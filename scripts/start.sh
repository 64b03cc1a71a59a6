#!/bin/sh
# `npm start`: runs the product's bundle with the three settings that only take
# effect when a process starts (libs/config, docs/benchmarks.md):
#   SEMI_SPACE_MB     V8's young generation semi-space (node --max-semi-space-size), default 4
#   MALLOC_ARENA_MAX  glibc's malloc arenas, default 2 (0: glibc's own default)
#   MALLOC_MMAP_THRESHOLD_  glibc's mmap threshold, bytes, default 1048576 (0: glibc's own, dynamic, default)
# Each can be set in the environment, in the forms libs/config reads (surrounding spaces and `_` allowed: 1_048_576);
# what is passed on is plain decimal digits. A value that is not a whole number in range is refused here, before node
# starts.
# `exec` keeps the process id: what is started (and signalled, pinned, measured) is node itself.
# CROWDPLAY_BUNDLE (default dist/crowdplay.js beside this script) and CROWDPLAY_NODE (default node) are for the load
# scenarios, which build the bundle elsewhere and run under a given node.
set -eu

semi="${SEMI_SPACE_MB:-4}"
arena="${MALLOC_ARENA_MAX:-2}"
mmap="${MALLOC_MMAP_THRESHOLD_:-1048576}"
check() { # name value min max: prints the value as plain decimal digits, or refuses it (exit 2)
  # Read as libs/config reads an integer (surrounding spaces and every `_` dropped), then passed on without leading
  # zeros: glibc would read MALLOC_ARENA_MAX=010 as octal 8 (and 08 as invalid) where the config reads 10 and 8.
  v=$(printf '%s' "$2" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e 's/_//g')
  case "$v" in '' | *[!0-9]*) echo "crowdplay: $1 must be a whole number $3–$4, got \"$2\"" >&2; exit 2 ;; esac
  while [ "${#v}" -gt 1 ] && [ "${v#0}" != "$v" ]; do v="${v#0}"; done
  if [ "${#v}" -gt "${#4}" ] || [ "$v" -lt "$3" ] || [ "$v" -gt "$4" ]; then echo "crowdplay: $1 must be a whole number $3–$4, got \"$2\"" >&2; exit 2; fi
  printf '%s' "$v"
}
semi=$(check SEMI_SPACE_MB "$semi" 1 1024) || exit 2
arena=$(check MALLOC_ARENA_MAX "$arena" 0 1024) || exit 2
mmap=$(check MALLOC_MMAP_THRESHOLD_ "$mmap" 0 33554432) || exit 2
if [ "$arena" -eq 0 ]; then unset MALLOC_ARENA_MAX; else export MALLOC_ARENA_MAX="$arena"; fi
if [ "$mmap" -eq 0 ]; then unset MALLOC_MMAP_THRESHOLD_; else export MALLOC_MMAP_THRESHOLD_="$mmap"; fi
export SEMI_SPACE_MB="$semi"

bundle="${CROWDPLAY_BUNDLE:-$(dirname "$0")/../dist/crowdplay.js}"
exec "${CROWDPLAY_NODE:-node}" --max-semi-space-size="$semi" "$bundle" "$@"
