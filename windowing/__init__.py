"""rewindow's windowing engine: streaming window semantics, replayed deterministically."""

from windowing.config import ConfigError, Pipeline, load_pipeline, parse_pipeline

__all__ = ["ConfigError", "Pipeline", "load_pipeline", "parse_pipeline", "replay", "ReplayResult"]


def __getattr__(name: str) -> object:  # the Spark runner imports pyspark; keep `import windowing` light
    if name in ("replay", "ReplayResult"):
        from windowing.runner import replay  # noqa: PLC0415 - keeps `import windowing` light: the runner imports pyspark

        return getattr(replay, name)
    raise AttributeError(name)
