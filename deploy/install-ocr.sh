#!/usr/bin/env bash
# Debian's Tesseract language data for OCR (chunker.ocr, docs/chunking.md "OCR engines"), run by
# `make setup` and the Dockerfile. Idempotent and quick when installed: it only looks for the files.
# PyMuPDF's wheel has Tesseract built in; it needs <lang>.traineddata (tesseract-ocr-<lang>), and the
# `tesseract` binary tells it where they are. Extra languages: deploy/install-ocr.sh deu fra ...
# The languages cover the scripts users bring (docs/chunking.md "OCR in the page's script"): Latin,
# Cyrillic, Greek, Arabic, Hebrew, Devanagari, Han simplified and traditional, Japanese, Korean; about
# 16 MB of language data (32 MB with osd, which tesseract-ocr brings for script detection).
# Fonts: fonts-dejavu-core (Latin, Cyrillic, Greek, Arabic, Hebrew), fonts-freefont-ttf and
# fonts-lohit-deva (Devanagari): what the tests' generated documents are written in (tests/fixtures/scripts.py).
set -euo pipefail
languages=(eng rus ell ara heb hin chi_sim chi_tra jpn kor "$@")
tessdata=${TESSDATA_PREFIX:-/usr/share/tesseract-ocr/5/tessdata}
packages=(tesseract-ocr fonts-dejavu-core fonts-freefont-ttf fonts-lohit-deva)
missing=0
command -v tesseract >/dev/null || missing=1
[ -f "$tessdata/osd.traineddata" ] || missing=1
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing=1
[ -f /usr/share/fonts/truetype/freefont/FreeSerif.ttf ] || missing=1
[ -f /usr/share/fonts/truetype/lohit-devanagari/Lohit-Devanagari.ttf ] || missing=1
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
