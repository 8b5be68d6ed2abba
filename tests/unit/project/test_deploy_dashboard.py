"""The Grafana dashboard in deploy/grafana plots metrics that exist.

Metric names and labels come from a live ``docstream.metrics.Metrics()`` registry
(with the exposition suffixes: _total for counters, _bucket/_sum/_count for
histograms), so renaming a metric or a label breaks this test, not the dashboard.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from docstream.metrics import Metrics

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "docstream.json"
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"

# What the issue asks the dashboard to show, by metric family (names as registered).
REQUIRED = {
    "throughput": {"docstream_records_in", "docstream_records_out"},
    "lag": {"docstream_consumer_lag"},
    "batch size": {"docstream_batch_size"},
    "model latency": {"docstream_model_latency_seconds"},
    "write latency": {"docstream_write_latency_seconds"},
    "failures": {"docstream_records_failed"},
    "dlq": {"docstream_dlq"},
}
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}
_PROMQL_WORDS = {
    # aggregations and keywords
    "sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "inf", "nan",
    # functions
    "rate", "irate", "increase", "delta", "idelta", "deriv", "histogram_quantile", "histogram_count",
    "histogram_sum", "histogram_fraction", "abs", "ceil", "floor", "round", "exp", "ln", "log2", "log10", "sqrt",
    "clamp", "clamp_min", "clamp_max", "absent", "absent_over_time", "changes", "resets", "predict_linear",
    "label_replace", "label_join", "vector", "scalar", "time", "timestamp", "sort", "sort_desc",
    "avg_over_time", "min_over_time", "max_over_time", "sum_over_time", "count_over_time", "quantile_over_time",
    "last_over_time", "stddev_over_time", "stdvar_over_time", "present_over_time",
}


@cache
def _families() -> dict[str, tuple[str, frozenset[str]]]:
    """Registered family name -> (type, label names)."""
    metrics = Metrics()
    labels = {
        wrapper._name: frozenset(wrapper._labelnames)  # prometheus_client keeps them only here
        for wrapper in vars(metrics).values()
        if isinstance(wrapper, MetricWrapperBase)
    }
    return {family.name: (family.type, labels[family.name]) for family in metrics.registry.collect()}


@cache
def _series_names() -> dict[str, str]:
    """Every name a series of the registry can have -> its family."""
    return {
        family + suffix: family
        for family, (kind, _) in _families().items()
        for suffix in _SUFFIXES[kind]
    }


def _dashboard() -> dict[str, Any]:
    loaded = json.loads(DASHBOARD.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _panels(panels: list[dict[str, Any]] | None = None) -> Iterator[dict[str, Any]]:
    for panel in _dashboard()["panels"] if panels is None else panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _expressions() -> list[str]:
    exprs = [target["expr"] for panel in _panels() for target in panel.get("targets", [])]
    for variable in _dashboard()["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def _grafana_to_promql(expr: str) -> str:
    """Template queries and Grafana variables, as plain PromQL."""
    values = re.fullmatch(r"\s*label_values\((?:(.+),)?\s*([a-zA-Z_]\w*)\s*\)\s*", expr)
    if values:
        return values.group(1) or ""
    return re.sub(r"\$\{?\w+\}?", "1m", expr)


def _metric_names(expr: str) -> set[str]:
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', _grafana_to_promql(expr))
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    words = set(re.findall(r"(?<![\w.])[a-zA-Z_:][\w:]*", text))
    return words - _PROMQL_WORDS


def _labels_used(expr: str) -> Iterator[tuple[str, set[str]]]:
    """(metric, label names) for each selector with matchers, and ("*", labels) for each grouping."""
    text = _grafana_to_promql(expr)
    for metric, matchers in re.findall(r"([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}", text):
        yield metric, set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", matchers))
    for grouping in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", text):
        yield "*", {label.strip() for label in grouping.split(",") if label.strip()}


def test_registry_names_are_docstream_metrics() -> None:
    assert _families()
    assert all(name.startswith("docstream_") for name in _families())


@pytest.mark.parametrize("expr", _expressions())
def test_every_expression_uses_only_registered_metrics(expr: str) -> None:
    names = _metric_names(expr)
    assert names, f"no metric in {expr!r}"
    unknown = sorted(names - set(_series_names()))
    assert unknown == [], f"not series of docstream.metrics.Metrics: {unknown} in {expr!r}"


@pytest.mark.parametrize("expr", _expressions())
def test_every_expression_uses_only_real_labels(expr: str) -> None:
    families = {_series_names()[name] for name in _metric_names(expr) if name in _series_names()}
    available = set().union(*(_families()[f][1] for f in families))
    if any(_families()[f][0] == "histogram" for f in families):
        available.add("le")
    for metric, labels in _labels_used(expr):
        if metric != "*" and metric not in _series_names():
            continue  # an unknown metric fails test_every_expression_uses_only_registered_metrics
        own = available if metric == "*" else set(_families()[_series_names()[metric]][1])
        if metric.endswith("_bucket"):
            own.add("le")
        assert labels <= own, f"labels {sorted(labels - own)} not on {metric} in {expr!r}"


@pytest.mark.parametrize("topic", sorted(REQUIRED))
def test_dashboard_shows_what_the_issue_asks(topic: str) -> None:
    families = REQUIRED[topic]
    assert families <= set(_families()), f"renamed or removed: {sorted(families - set(_families()))}"
    used = {_series_names()[name] for expr in _expressions() for name in _metric_names(expr)}
    assert families <= used, f"{topic}: no panel plots {sorted(families - used)}"


def test_panels_are_well_formed() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"]
    panels = list(_panels())
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            refs = [target["refId"] for target in panel["targets"]]
            assert len(refs) == len(set(refs)), panel["title"]


def test_panels_use_the_provisioned_datasource() -> None:
    (datasource,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    assert datasource["type"] == "prometheus"
    for panel in _panels():
        for owner in [panel, *panel.get("targets", [])]:
            if "datasource" in owner:
                assert owner["datasource"] == {"type": "prometheus", "uid": datasource["uid"]}, panel["title"]
    for variable in _dashboard()["templating"]["list"]:
        assert variable["datasource"]["uid"] == datasource["uid"]
