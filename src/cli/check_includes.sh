#!/usr/bin/env bash
# The front ends' include boundary (issue 29): kvtier's user commands (src/cli, every file not
# named bench_* or *_test.cc) include only public headers (kvtier/*), their own (cli/*) and the
# exceptions in USER_EXCEPTIONS; kvtier-bench (src/cli/bench_*, bench/*) may also include the
# internal headers in BENCH_INTERNAL (the modules it measures). Usage: check_includes.sh SRC_DIR
# USER_EXCEPTIONS: internal headers user commands still need until a public API replaces them.
set -euo pipefail
shopt -s nullglob
root=${1:?usage: check_includes.sh SOURCE_DIR}
USER_EXCEPTIONS=(
  base/thread_pool.h  # generate.cc: Model::Forward takes a ThreadPool
  base/strings.h      # make_test_model.cc: DescribeBytes
  model/test_model.h  # make_test_model: the test model writer
  tier/block_file.h   # cache_cmd.cc: verify / stats of block files
  tier/segment_file.h # cache_cmd.cc
)
BENCH_INTERNAL=(
  base/aligned_buffer.h base/dtype_io.h base/half.h base/stats.h base/strings.h base/sysinfo.h
  base/thread_pool.h base/timer.h engine/prefill.h kernels/probe.h model/matmul.h
  tier/block_file.h
)
status=0
check() {  # file, allowed...
  local f=$1; shift
  local inc
  while read -r inc; do
    case $inc in kvtier/* | cli/*) continue ;; esac
    local ok=0 a
    for a in "$@"; do [ "$inc" = "$a" ] && ok=1; done
    if [ $ok -eq 0 ]; then
      echo "${f#"$root"/}: includes $inc (not public, not allowed here)" >&2
      status=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
}
for f in "$root"/src/cli/*.cc "$root"/src/cli/*.h; do
  case $(basename "$f") in
    *_test.cc | cli_test_util.h) ;;
    bench_*) check "$f" "${BENCH_INTERNAL[@]}" ;;
    *) check "$f" "${USER_EXCEPTIONS[@]}" ;;
  esac
done
for f in "$root"/bench/*.cc "$root"/bench/*.h; do
  [ "$(basename "$f")" = micro_formats.h ] && continue
  check "$f" "${BENCH_INTERNAL[@]}" micro_formats.h
done
exit $status
