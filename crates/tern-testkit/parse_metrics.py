"""Parses Prometheus text from stdin with prometheus_client's parser; prints the families as JSON.

Used through `tern_testkit::prometheus`, so /metrics is checked by a real third-party parser.
"""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

families = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    families[family.name] = {
        "type": family.type,
        "help": family.documentation,
        "samples": [[s.name, s.labels, s.value] for s in family.samples],
    }
json.dump(families, sys.stdout)
