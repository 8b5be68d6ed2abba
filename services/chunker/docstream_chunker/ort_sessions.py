"""ONNX Runtime sessions that sleep between operators instead of spinning, in the process that extracts.

PyMuPDF's layout model (``pymupdf.layout``, the table finder's unruled tables) and RapidOCR make their own
``onnxruntime.InferenceSession`` with ONNX Runtime's default options, whose intra-op threads spin-wait
after each operator for the next one. Beside the embedding model on the same cores, and beside the
layout model's own Python steps, the spinning only burns CPU: without it a page of the layout model
costs about a third less CPU and less wall time, and ``docstream run`` on table-heavy PDFs is faster
(docs/chunking.md "Tables"). Neither library takes session
options, so ``quiet_sessions`` gives the ``onnxruntime`` module a subclass of ``InferenceSession`` that turns
spinning off (``session.intra_op.allow_spinning`` ``0``) in whatever options its caller passes and builds the
session as asked otherwise. It is this project's only patch of ONNX Runtime, made once per process by
``worker.DocumentProcessor``; ``QuietSessions.undo`` restores the class.

Written for ONNX Runtime's public constructor ``InferenceSession(path_or_bytes, sess_options=None,
providers=None, provider_options=None, **kwargs)`` (onnxruntime 1.32, requirements.lock). With other
parameters the sessions are left as they are and ``onnxruntime_sessions_unchanged`` is logged: the patch is
for speed alone, nothing depends on it, so a changed library costs CPU, never a refusal to start.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from docstream.logging import get_logger

__all__ = ["PARAMETERS", "SPINNING", "QuietSessions", "quiet_sessions"]

_log = get_logger(__name__)

SPINNING = "session.intra_op.allow_spinning"
"""ONNX Runtime's session option for its intra-op threads' spin-waiting (unset: they spin)."""
PARAMETERS = ("self", "path_or_bytes", "sess_options", "providers", "provider_options", "kwargs")
"""The parameters of ``onnxruntime.InferenceSession.__init__`` the patch was written for."""


@dataclass(frozen=True, slots=True)
class QuietSessions:
    """The patch ``quiet_sessions`` made: ``module.InferenceSession`` is ``quiet``, and was ``previous``."""

    module: Any
    previous: type[Any]
    quiet: type[Any]

    def undo(self) -> None:
        """Give the module its class back (sessions made meanwhile keep their options)."""
        if self.module.InferenceSession is self.quiet:
            self.module.InferenceSession = self.previous


def quiet_sessions(module: ModuleType | None = None) -> QuietSessions | None:
    """Make every ONNX Runtime session this process creates from now on sleep between operators.

    Args:
        module: ``onnxruntime`` (None: imported here).

    Returns:
        The patch (the same one when the module has it already); None when ONNX Runtime is not installed or its
        constructor has other parameters than ``PARAMETERS`` (logged).
    """
    ort: Any = module
    if ort is None:
        try:
            import onnxruntime
        except ImportError:  # no layout model and no RapidOCR here: nothing makes a session
            return None
        ort = onnxruntime
    current = ort.InferenceSession
    patch = getattr(current, "docstream_patch", None)
    if isinstance(patch, QuietSessions):
        return patch
    found = tuple(inspect.signature(current.__init__).parameters)
    if found != PARAMETERS:
        _log.warning("onnxruntime_sessions_unchanged", version=getattr(ort, "__version__", "?"),
                     parameters=list(found), expected=list(PARAMETERS))
        return None
    options_type = ort.SessionOptions

    class QuietInferenceSession(current):  # type: ignore[misc,valid-type]
        """An ``InferenceSession`` whose intra-op threads do not spin (module docstring)."""

        def __init__(self, path_or_bytes: Any, sess_options: Any = None, providers: Any = None,
                     provider_options: Any = None, **kwargs: Any) -> None:
            options = sess_options if sess_options is not None else options_type()
            options.add_session_config_entry(SPINNING, "0")
            super().__init__(path_or_bytes, options, providers, provider_options, **kwargs)

    made = QuietSessions(ort, current, QuietInferenceSession)
    QuietInferenceSession.docstream_patch = made
    ort.InferenceSession = QuietInferenceSession
    return made
