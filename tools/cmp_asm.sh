#!/usr/bin/env bash
# Compares the machine code of the functions whose mangled names match PATTERN in two binaries
# (addresses and call targets stripped): per function, its lines in each and how many differ.
# Usage: tools/cmp_asm.sh OLD NEW 'AccumulateV4|AccumulateVRot'
set -euo pipefail
OLD=$1; NEW=$2; PAT=$3
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
dis() {
  objdump -d --no-show-raw-insn --disassemble="$2" "$1" | sed -n '/>:$/,$p' |
    sed -E 's/^ *[0-9a-f]+:\s*//; s/0x[0-9a-f]+/X/g; s/[0-9a-f]{6,}/A/g; s/<[^>]*>//g'
}
nm "$OLD" | awk '{print $3}' | grep -E "$PAT" | sort -u | while read -r s; do
  dis "$OLD" "$s" > "$T/o"; dis "$NEW" "$s" > "$T/n"
  printf '%s  lines %s / %s  differing %s\n' "$(echo "$s" | c++filt | cut -c1-90)" \
    "$(wc -l < "$T/o")" "$(wc -l < "$T/n")" "$(diff "$T/o" "$T/n" | grep -c '^[<>]' || true)"
done
