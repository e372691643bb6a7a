#!/usr/bin/env bash
# run-fuzzers.sh DIR SECONDS: runs each libFuzzer target built in DIR for SECONDS over a scratch copy of its
# seed corpus (fuzz/corpus/<target>), so the checked-in seeds never grow with generated inputs.
#
# Prints one line per target (ok / FAILED / skipped and why) and exits non-zero if any run failed (a crash,
# a timeout of one input, or too much memory: libFuzzer exits non-zero and leaves crash-* in the log dir).
# Used by `make fuzz`; try it by hand with: scripts/run-fuzzers.sh build/fuzz/fuzz 10
set -u

if [ $# -ne 2 ]; then
  echo "usage: $0 DIR SECONDS" >&2
  exit 2
fi
dir=$1
seconds=$2
case $seconds in '' | *[!0-9]*) echo "SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac

# Absolute, because each fuzzer runs from its scratch directory (where it drops crash-* files).
if [ -d "$dir" ]; then dir=$(cd "$dir" && pwd); fi
repo=$(cd "$(dirname "$0")/.." && pwd)
# Every libFuzzer target built in DIR (fuzz/CMakeLists.txt defines them; `make fuzz` builds them all).
targets=$(cd "$dir" 2>/dev/null && for f in *_fuzz; do [ -x "$f" ] && echo "$f"; done)
[ -n "$targets" ] || { echo "no *_fuzz executables in $dir" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mmserve-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

failed=0
for target in $targets; do
  binary=$dir/$target
  if [ ! -x "$binary" ]; then
    echo "$target: skipped (not built: no executable $binary)"
    continue
  fi
  corpus=$work/$target/corpus
  mkdir -p "$corpus"
  if [ -d "$repo/fuzz/corpus/$target" ]; then
    cp -R "$repo/fuzz/corpus/$target/." "$corpus/"
  fi
  log=$work/$target/log.txt
  # Crash reproducers land next to the log; on failure they are kept in a directory we print.
  if (cd "$work/$target" && "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      "$corpus" >"$log" 2>&1); then
    runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -1)
    echo "$target: ok (${seconds}s, ${runs:-?} runs)"
  else
    failed=1
    keep=$(mktemp -d "${TMPDIR:-/tmp}/mmserve-fuzz-$target-failure.XXXXXX")
    cp "$log" "$keep/"
    find "$work/$target" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \
      -o -name 'leak-*' \) -exec cp {} "$keep/" \;
    echo "$target: FAILED (log and reproducers in $keep)"
    grep -E 'ERROR|SUMMARY' "$log" | head -5 | sed "s/^/  $target: /"
  fi
done
exit $failed
