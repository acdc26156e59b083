"""Checks the operator kit against a live system: every expression in alerts.yml and
dashboard.json must parse as PromQL (promql-parser, the Prometheus grammar), and every metric
they use must be exported by the services' /metrics pages.

Usage: check.py URL [URL ...]  (the /metrics URLs of an api, a runner and a notifier)

A metric counts as exported when its family is declared (`# TYPE`) on some page, so a
counter that has not moved yet still counts; `_total`, `_bucket`, `_sum`, `_count` name the
samples of a family. Fails (exit 1) naming each metric nobody exports, and when the rules or
the dashboard cannot be read or use no metric at all.
"""

import json
import pathlib
import re
import sys
import urllib.request

import promql_parser
import yaml

HERE = pathlib.Path(__file__).parent
PREFIXES = ("http_", "api_", "runner_", "notifier_", "mongodb_")
SUFFIXES = ("_total", "_bucket", "_sum", "_count")


def metrics_in(expr):
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {n for n in names if n.startswith(PREFIXES)}


def parsed(expr, where):
    """`expr`, after checking it parses as PromQL; names `where` when it does not."""
    try:
        promql_parser.parse(expr)
    except Exception as e:  # the parser raises a plain exception with its reason
        raise AssertionError(f"{where}: not PromQL ({e}): {expr}") from e
    return expr


def used_by_rules(path):
    groups = yaml.safe_load(path.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert rules, "no rules"
    for rule in rules:
        assert rule.get("alert") and rule.get("expr"), f"a rule without alert or expr: {rule}"
        parsed(rule["expr"], f"alert {rule['alert']}")
    return {m for rule in rules for m in metrics_in(rule["expr"])}


def used_by_dashboard(path):
    dashboard = json.loads(path.read_text())
    exprs = [
        parsed(t["expr"], f"panel {panel.get('title')}")
        for panel in dashboard["panels"]
        for t in panel.get("targets", [])
    ]
    assert exprs, "no panel queries"
    return {m for e in exprs for m in metrics_in(e)}


def family(name):
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def exported(urls):
    families = set()
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        assert text.rstrip().endswith("# EOF"), f"{url} is not OpenMetrics text"
        families |= {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    return families


def main(urls):
    used = used_by_rules(HERE / "alerts.yml") | used_by_dashboard(HERE / "dashboard.json")
    assert used, "the rules and the dashboard use no metric"
    families = exported(urls)
    missing = sorted(m for m in used if family(m) not in families and m not in families)
    if missing:
        print("not exported by any service: " + ", ".join(missing), file=sys.stderr)
        return 1
    print(f"alerts.yml and dashboard.json use {len(used)} metrics; all are exported: {', '.join(sorted(used))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
