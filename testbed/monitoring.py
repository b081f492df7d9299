"""The shipped alert rules and Grafana dashboard, read as data for tests.

- :func:`alert_exprs` / :func:`panel_exprs`: the PromQL of ``config/prometheus/alerts.yaml``
  and ``config/grafana/msop.json``, so a test can evaluate every one against a real
  Prometheus scraping a real msop.
- :func:`exported_metrics`: the series names msop's ``/metrics`` can serve, with their label
  names, taken from :data:`msop.metrics.REGISTRY` after importing every ``metrics`` module.
- :func:`metric_names`, :func:`matchers`, :func:`grouping_labels`: the metric and
  label names a PromQL expression refers to (a lexical scan, enough for our own rules).
- :func:`documented_scrape_config`: the Prometheus configuration docs/tasks/monitoring.md
  gives, as data.
- :func:`prometheus_tools`: the directory of ``prometheus`` and ``promtool``, built from
  their Go module by ``hack/prometheus/build.sh`` (cached; ``make prometheus``).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import signal
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from prometheus_client import CollectorRegistry

import msop
from msop.metrics import REGISTRY
from testbed.paths import REPO
from testbed.ports import free_port

__all__ = [
    "ALERTS",
    "DASHBOARD",
    "MONITORING_DOC",
    "TARGET_LABELS",
    "Matcher",
    "alert_exprs",
    "dashboard_variables",
    "documented_scrape_config",
    "exported_metrics",
    "grouping_labels",
    "matchers",
    "metric_names",
    "panel_exprs",
    "prometheus_tools",
]

ALERTS = REPO / "config" / "prometheus" / "alerts.yaml"
"""The alert rule file (in a source checkout)."""
DASHBOARD = REPO / "config" / "grafana" / "msop.json"
"""The Grafana dashboard (in a source checkout)."""

TARGET_LABELS = frozenset(
    {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}
)
"""Labels Prometheus attaches to every scraped series (``job``, ``instance``) or that the
usual Kubernetes service discovery relabelling (``namespace``, ``pod``) or a
ServiceMonitor (also ``service``, ``endpoint``, ``container``) adds to the target's; rules
may select and group by them, and no series msop exposes may carry one of them.
"""


# Series Prometheus itself makes for every target.
_SYNTHETIC = {"up": frozenset(TARGET_LABELS)}

# Sample-name suffixes prometheus_client's text format adds per metric type.
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}


def alert_exprs(path: Path = ALERTS) -> list[tuple[str, str]]:
    """(alert name, expr) of every alerting rule in ``path``, in file order."""
    doc = yaml.safe_load(path.read_text())
    return [
        (str(rule["alert"]), str(rule["expr"]).strip())
        for group in doc["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])  # collapsed rows hold their panels


def panel_exprs(path: Path = DASHBOARD, **variables: str) -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel in the dashboard at ``path``.

    A panel with several targets appears once per target. ``$name`` / ``${name}`` in an
    expr are replaced by ``variables[name]``, else by the variable's current value in the
    dashboard (see :func:`dashboard_variables`); unknown variables are left in place.
    """
    dashboard = json.loads(path.read_text())
    values = {**dashboard_variables(dashboard), **variables}

    def substitute(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return values.get(name, m.group(0))

    return [
        (str(panel.get("title", "")), re.sub(r"\$\{(\w+)\}|\$(\w+)", substitute, target["expr"]))
        for panel in _panels(dashboard.get("panels") or [])
        for target in panel.get("targets") or []
        if "expr" in target
    ]


def dashboard_variables(dashboard: dict[str, Any]) -> dict[str, str]:
    """The current (else first) value of every non-datasource template variable."""
    out: dict[str, str] = {}
    for var in (dashboard.get("templating") or {}).get("list") or []:
        if var.get("type") == "datasource":
            continue
        current = (var.get("current") or {}).get("value")
        if current is None and var.get("options"):
            current = var["options"][0].get("value")
        if current is None:
            current = var.get("query", "")
        out[str(var["name"])] = str(current[0] if isinstance(current, list) else current)
    return out


def _import_metrics_modules() -> None:
    """Import every ``msop`` module named ``metrics``: their import registers msop's
    metrics on :data:`msop.metrics.REGISTRY`, as the running operator's imports do."""
    for info in pkgutil.walk_packages(msop.__path__, "msop.", onerror=lambda _name: None):
        if info.name.rsplit(".", 1)[-1] == "metrics" and not info.ispkg:
            importlib.import_module(info.name)


def _label_names(collector: Any, family: Any) -> frozenset[str]:
    # prometheus_client has no public accessor for the label names of a metric that has
    # no children yet; both its metric wrappers and its *MetricFamily keep them here.
    names: tuple[str, ...] = (
        getattr(collector, "_labelnames", None) or getattr(family, "_labelnames", None) or ()
    )
    return frozenset(str(n) for n in names)


def exported_metrics(registry: CollectorRegistry = REGISTRY) -> dict[str, frozenset[str]]:
    """Every series name msop's ``/metrics`` may serve -> its label names (``le`` included
    for histogram buckets), plus ``up``. Covers labelled metrics that have no series yet."""
    if registry is REGISTRY:
        _import_metrics_modules()
    out = dict(_SYNTHETIC)
    # The registry's collectors, to read label names; collect() alone omits metrics that
    # have no children yet (they yield no samples).
    collectors: list[Any] = list(getattr(registry, "_collector_to_names", {}))
    for collector in collectors:
        for family in collector.collect():
            labels = _label_names(collector, family)
            for suffix in _SUFFIXES.get(family.type, ("",)):
                extra = {"le"} if suffix == "_bucket" else set()
                out[family.name + suffix] = labels | extra
            for sample in family.samples:  # anything the suffix table does not know
                out.setdefault(sample.name, labels | frozenset(sample.labels))
    return out


# --- a lexical look at PromQL ---------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)", re.IGNORECASE
)
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^{}]*)\}")
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])")
_KEYWORDS = frozenset(
    [
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "atan2",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
        "inf",
        "nan",
    ]
)


def _without_strings(expr: str) -> str:
    return _STRING.sub('""', expr)


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (not functions, keywords, labels or durations)."""
    text = _without_strings(expr)
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    text = re.sub(r"\boffset\s+\w+", " ", text, flags=re.IGNORECASE)
    names = set()
    for m in _IDENT.finditer(text):
        word = m.group(1)
        if word.lower() in _KEYWORDS or text[m.end() :].lstrip().startswith("("):
            continue  # an operator, or a function call
        names.add(word)
    return names


class Matcher(NamedTuple):
    """One label matcher of a selector: ``metric{label op "value"}``."""

    metric: str
    """The selector's metric name, "" when it has none."""
    label: str
    op: str
    """``=``, ``!=``, ``=~`` or ``!~``."""
    value: str
    """The value as written (escapes kept)."""


def matchers(expr: str) -> list[Matcher]:
    """Every label matcher of every selector in ``expr``."""
    # Strings are blanked out to find the selectors (a string may contain braces) without
    # moving anything, so the matchers are read from the original text at the same place.
    blank = _STRING.sub(lambda m: '"' + " " * (len(m.group(0)) - 2) + '"', expr)
    return [
        Matcher(sel.group(1) or "", m.group(1), m.group(2), m.group(3))
        for sel in _SELECTOR.finditer(blank)
        for m in _MATCHER.finditer(expr, sel.start(2), sel.end(2))
    ]


def grouping_labels(expr: str) -> set[str]:
    """The labels named in ``by``, ``without``, ``on``, ``ignoring`` and ``group_*``."""
    text = _without_strings(expr)
    return {
        name.strip()
        for m in _GROUPING.finditer(text)
        for name in m.group(2).split(",")
        if name.strip()
    }


def prometheus_tools() -> Path:
    """The directory holding ``prometheus`` and ``promtool``: ``hack/prometheus/build.sh``
    prints it, building both from their Go module on first use (minutes) and answering at
    once afterwards; ``$MSOP_PROMETHEUS_BIN`` overrides it. The tools on ``PATH`` are never
    used, so a package installed on the machine cannot hide a missing install step.

    Raises ``RuntimeError`` with the build's output when the build fails."""
    proc = subprocess.run(
        [str(REPO / "hack" / "prometheus" / "build.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"hack/prometheus/build.sh failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


MONITORING_DOC = REPO / "docs" / "tasks" / "monitoring.md"
"""The monitoring task page, whose YAML block with ``scrape_configs`` users copy."""


def documented_scrape_config(path: Path = MONITORING_DOC) -> dict[str, Any]:
    """The Prometheus configuration the monitoring page gives (its one YAML block that has
    ``scrape_configs``), parsed, so a test scrapes msop exactly as the page says."""
    blocks = re.findall(r"```yaml\n(.*?)```", path.read_text(), re.DOTALL)
    configs = [yaml.safe_load(b) for b in blocks if "scrape_configs:" in b]
    assert len(configs) == 1, f"{path}: {len(configs)} YAML blocks with scrape_configs"
    config: dict[str, Any] = configs[0]
    return config


class LocalPrometheus:
    """A real Prometheus on loopback scraping ``scrape_configs`` every second, and
    evaluating ``rule_files`` every second, for a test:
    ``with LocalPrometheus(tmp_path, configs, log) as prom: prom.get("/api/v1/targets")``.
    Its data lives under ``workdir``; its output goes to ``log``."""

    def __init__(
        self,
        workdir: Path,
        scrape_configs: list[dict[str, Any]],
        log: Path,
        rule_files: list[Path] | None = None,
    ) -> None:
        self.workdir = workdir
        self.scrape_configs = scrape_configs
        self.log = log
        self.rule_files = [str(f) for f in rule_files or []]
        self.base = f"http://127.0.0.1:{free_port()}"
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LocalPrometheus:
        config = self.workdir / "prometheus.yml"
        config.write_text(json.dumps({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": self.scrape_configs,
            "rule_files": self.rule_files,
        }))  # fmt: skip
        with self.log.open("wb") as out:
            self._proc = subprocess.Popen(
                [str(prometheus_tools() / "prometheus"), f"--config.file={config}",
                 f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address={self.base.removeprefix('http://')}"],
                stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir,
            )  # fmt: skip
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def get(self, path: str, **params: str) -> Any:
        """GET from its HTTP API: JSON decoded, anything else as text. Fails at once if
        Prometheus has exited."""
        assert self._proc is not None and self._proc.poll() is None, (
            f"prometheus exited {self._proc.returncode if self._proc else None}; see {self.log}"
        )
        url = (
            f"{self.base}{path}?{urllib.parse.urlencode(params)}"
            if params
            else (f"{self.base}{path}")
        )
        with urllib.request.urlopen(url, timeout=5) as resp:
            if resp.headers.get_content_type() == "application/json":
                return json.loads(resp.read())
            return resp.read().decode()

    def ready(self) -> bool:
        try:
            return "Ready" in self.get("/-/ready")
        except OSError:
            return False
