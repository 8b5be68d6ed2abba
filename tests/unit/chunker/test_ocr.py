"""docstream_chunker.ocr: which engine, what is missing, how large a page is rendered (no OCR runs here)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

from docstream.errors import ConfigError
from docstream.settings import OcrSettings, Settings
from docstream_chunker.ocr import MAX_OCR_PIXELS, open_engine, render_dpi


def test_importing_ocr_imports_no_engine() -> None:
    """The chunker's parent process imports docstream_chunker.ocr (settings, types); only its child renders pages."""
    engines = "{'pymupdf', 'numpy', 'rapidocr_onnxruntime', 'cv2'}"
    code = f"import sys, docstream_chunker.ocr; print(sorted({engines} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_a_page_renders_at_the_configured_dpi() -> None:
    assert render_dpi(612, 792, 200) == 200
    assert render_dpi(595, 842, 600) == 600  # A4 at 600 dpi: 35 M pixels, under the bound


def test_a_huge_page_renders_at_less_so_its_image_stays_bounded() -> None:
    width, height = 72 * 100, 72 * 100  # 100 x 100 inches
    dpi = render_dpi(width, height, 300)
    assert dpi < 300
    assert (width / 72 * dpi) * (height / 72 * dpi) <= MAX_OCR_PIXELS
    assert render_dpi(width, height, 300, max_pixels=1) >= 1


def test_the_default_engine_is_tesseract_in_auto_mode() -> None:
    ocr = Settings().chunker.ocr
    assert (ocr.engine, ocr.mode, ocr.languages, ocr.dpi) == ("tesseract", "auto", ["eng"], 200)


@pytest.mark.parametrize("code", ["../eng", "eng+rus", "", "\u0440\u0443", "a" * 17])
def test_languages_must_be_tesseract_codes(code: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="languages"):
        OcrSettings(languages=[code])


def test_tesseract_without_language_data_is_unavailable_and_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        open_engine(OcrSettings(engine="tesseract", languages=["eng", "chi_sim"], tessdata=str(tmp_path)))
    assert raised.value.code == "ocr_unavailable"
    assert "apt-get install tesseract-ocr-eng tesseract-ocr-chi-sim" in raised.value.message


def test_tesseract_with_the_language_files_opens(tmp_path: Path) -> None:
    (tmp_path / "eng.traineddata").write_bytes(b"not read until a page is recognised")
    engine = open_engine(OcrSettings(engine="tesseract", languages=["eng"], tessdata=str(tmp_path)))
    assert engine.name == "tesseract"


def test_rapidocr_reads_only_english_and_chinese() -> None:
    with pytest.raises(ConfigError) as raised:
        open_engine(OcrSettings(engine="rapidocr", languages=["eng", "rus"]))
    assert raised.value.code == "ocr_unavailable"
    assert "not rus" in raised.value.message and "tesseract" in raised.value.message


@pytest.mark.skipif(importlib.util.find_spec("rapidocr_onnxruntime") is None, reason="the [rapidocr] extra")
def test_rapidocr_opens_offline_with_the_models_of_its_wheel() -> None:
    assert open_engine(OcrSettings(engine="rapidocr", languages=["chi_sim"])).name == "rapidocr"
