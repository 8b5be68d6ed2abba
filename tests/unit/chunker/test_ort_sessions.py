"""ort_sessions: the extraction process's ONNX Runtime sessions do not spin, and the patch undoes cleanly."""

from __future__ import annotations

import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnxruntime
import pymupdf
import pytest

from docstream_chunker.ort_sessions import PARAMETERS, SPINNING, quiet_sessions

MODEL = Path(pymupdf.__file__).parent / "layout" / "resources" / "onnx" / "table_grid_model_v3.onnx"
"""One of the layout model's own networks, shipped in PyMuPDF's wheel."""


@pytest.fixture
def unpatched() -> Iterator[type[Any]]:
    """onnxruntime without the patch (a test before may have made it in this process), as it was afterwards."""
    existing = getattr(onnxruntime.InferenceSession, "docstream_patch", None)
    if existing is not None:
        existing.undo()
    base: type[Any] = onnxruntime.InferenceSession
    yield base
    made = getattr(onnxruntime.InferenceSession, "docstream_patch", None)
    if made is not None:
        made.undo()
    if existing is not None:
        onnxruntime.InferenceSession = existing.quiet


def test_a_session_made_with_default_options_or_its_callers_does_not_spin(unpatched: type[Any]) -> None:
    with pytest.raises(RuntimeError, match="does not have configuration"):  # unset: ONNX Runtime spins
        onnxruntime.InferenceSession(str(MODEL)).get_session_options().get_session_config_entry(SPINNING)
    patch = quiet_sessions()
    assert patch is not None and onnxruntime.InferenceSession is patch.quiet and patch.previous is unpatched
    plain = onnxruntime.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    assert plain.get_session_options().get_session_config_entry(SPINNING) == "0"
    options = onnxruntime.SessionOptions()
    options.enable_cpu_mem_arena = False  # what PyMuPDF's make_session asks
    own = onnxruntime.InferenceSession(str(MODEL), sess_options=options, providers=["CPUExecutionProvider"])
    assert own.get_session_options().get_session_config_entry(SPINNING) == "0"
    assert own.get_session_options().enable_cpu_mem_arena is False, "the caller's options are kept"
    assert isinstance(own, unpatched)


def test_patching_twice_is_the_same_patch_and_undo_gives_the_class_back(unpatched: type[Any]) -> None:
    first = quiet_sessions()
    assert first is not None and quiet_sessions() is first
    first.undo()
    assert onnxruntime.InferenceSession is unpatched
    first.undo()  # a second undo changes nothing
    assert onnxruntime.InferenceSession is unpatched


def test_a_constructor_with_other_parameters_is_left_alone() -> None:
    class Other:
        def __init__(self, model: Any, options: Any = None) -> None:
            self.model = model

    module = types.SimpleNamespace(InferenceSession=Other, SessionOptions=object, __version__="9.9")
    assert quiet_sessions(module) is None  # type: ignore[arg-type]
    assert module.InferenceSession is Other
    assert PARAMETERS[1:3] == ("path_or_bytes", "sess_options")
