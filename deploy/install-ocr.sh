#!/usr/bin/env bash
# Debian's Tesseract language data for OCR (chunker.ocr, docs/chunking.md "OCR engines"), run by
# `make setup` and the Dockerfile. Idempotent and quick when installed: it only looks for the files.
# PyMuPDF's wheel has Tesseract built in; it needs <lang>.traineddata (tesseract-ocr-<lang>), and the
# `tesseract` binary tells it where they are. Extra languages: deploy/install-ocr.sh deu fra ...
# fonts-dejavu-core: the TTFs the OCR accuracy test draws its Cyrillic scans in.
set -euo pipefail
languages=(eng rus chi_sim "$@")
tessdata=${TESSDATA_PREFIX:-/usr/share/tesseract-ocr/5/tessdata}
packages=(tesseract-ocr fonts-dejavu-core)
missing=0
command -v tesseract >/dev/null || missing=1
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing=1
for lang in "${languages[@]}"; do
  case "$lang" in *[!a-z_]*|"") echo "install-ocr: $lang is not a Tesseract language code (eng, chi_sim)" >&2; exit 2;; esac
  packages+=("tesseract-ocr-${lang//_/-}")
  [ -f "$tessdata/$lang.traineddata" ] || missing=1
done
if [ "$missing" = 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "OCR language data is missing: run 'sudo apt-get install -y --no-install-recommends ${packages[*]}'" >&2
  echo "(or 'sudo deploy/install-ocr.sh'; without it set DOCSTREAM_CHUNKER__OCR__MODE=off)" >&2
  exit 1
fi
echo "installing Debian's Tesseract language data for OCR (once): ${packages[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
command -v tesseract >/dev/null
