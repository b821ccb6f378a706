"""Pipeline configuration: the YAML of the windowing contract, section 10, read into a
frozen, validated :class:`Pipeline` (``load_pipeline(path)``); every mistake raises
:class:`ConfigError` naming the YAML field.

The modules, by role (each imports only modules listed below it, and never through this ``__init__``):

* :mod:`.loading`: :func:`load_pipeline`, :func:`parse_pipeline` and the section parsers;
* :mod:`.voltsp`: VoltSP compatibility (extractors, ``columns:``, ``sum (amount)``, the
  live pipeline's settings a replay ignores);
* :mod:`.reconcile`: the ``reconcile:`` block;
* :mod:`.outputs`: the ``output:`` block (:class:`~windowing.config.outputs.CatalogSpec`, the catalog tables);
* :mod:`.columns`: the columns a pipeline reads and its outputs have;
* :mod:`.model`: the enums, the frozen dataclasses, :class:`Pipeline`;
* :mod:`.fields`: :class:`ConfigError` and the helpers that read one field.

:mod:`.arrow_schemas` (the outputs' Arrow schemas) imports pyarrow and is not imported here.
"""

from windowing.config.columns import check_input_columns, output_columns
from windowing.config.fields import ConfigError
from windowing.config.loading import load_pipeline, parse_pipeline
from windowing.config.model import (
    AGGREGATE_TYPES,
    Aggregate,
    Clock,
    Lateness,
    Pipeline,
    Source,
    Trigger,
    WatermarkStrategy,
    Window,
    WindowType,
)
from windowing.config.voltsp import bean_property, ignored_fields_note

__all__ = [
    "AGGREGATE_TYPES",
    "Aggregate",
    "Clock",
    "ConfigError",
    "Lateness",
    "Pipeline",
    "Source",
    "Trigger",
    "WatermarkStrategy",
    "Window",
    "WindowType",
    "bean_property",
    "check_input_columns",
    "ignored_fields_note",
    "load_pipeline",
    "output_columns",
    "parse_pipeline",
]
