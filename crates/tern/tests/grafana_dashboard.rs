//! packaging/grafana/tern.json against the real server: every metric its PromQL queries, with
//! every literal label value it matches on, is in the `/metrics` of a tern that served traffic
//! (parsed by Python's prometheus_client, as Prometheus would read it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;
use tern_testkit::{free_port, http_get, prometheus, ServerProcess};

/// A metric in a query, with its `label="value"` (`=`) matchers and the labels it matches any
/// other way (`=~`, `!=`, `!~`, or a value holding a Grafana variable).
#[derive(Debug, Default, PartialEq)]
struct Selector {
    metric: String,
    equals: Vec<(String, String)>,
    other_labels: Vec<String>,
}

/// PromQL's aggregation operators: followed by `by (...)` or `(`, never a metric.
const AGGREGATIONS: &[&str] = &[
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
];
/// Keywords followed by a list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const OTHER_KEYWORDS: &[&str] = &["bool", "and", "or", "unless", "offset"];

/// The metric selectors of a PromQL expression (enough of the grammar for dashboards: functions,
/// aggregations with by/without, binary operators, ranges, strings, numbers).
fn selectors(expr: &str) -> Vec<Selector> {
    let chars: Vec<char> = expr.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    let skip_spaces = |mut i: usize| {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        i
    };
    // The index after the bracketed group that starts at `i` (`(`, `[` or `{`), strings skipped.
    let skip_group = |mut i: usize| {
        let (open, close) = match chars[i] {
            '(' => ('(', ')'),
            '[' => ('[', ']'),
            _ => ('{', '}'),
        };
        let mut depth = 0;
        let mut in_string = false;
        while i < chars.len() {
            let c = chars[i];
            if in_string {
                if c == '\\' {
                    i += 1;
                } else if c == '"' {
                    in_string = false;
                }
            } else if c == '"' {
                in_string = true;
            } else if c == open {
                depth += 1;
            } else if c == close {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            i += 1;
        }
        panic!("unbalanced {open} in {expr}");
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            i = skip_group_string(&chars, i);
        } else if c == '[' {
            i = skip_group(i);
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = skip_spaces(i);
            let followed_by = chars.get(next).copied();
            if LABEL_LISTS.contains(&word.as_str()) {
                // group_left and group_right may stand without a list.
                if followed_by == Some('(') {
                    i = skip_group(next);
                }
            } else if AGGREGATIONS.contains(&word.as_str())
                || OTHER_KEYWORDS.contains(&word.as_str())
                || followed_by == Some('(')
            {
                // A function, an aggregation or a keyword: its arguments are read on.
            } else {
                let mut selector = Selector {
                    metric: word,
                    ..Selector::default()
                };
                if followed_by == Some('{') {
                    let end = skip_group(next);
                    let body: String = chars[next + 1..end - 1].iter().collect();
                    parse_matchers(&body, &mut selector);
                    i = end;
                }
                found.push(selector);
            }
        } else {
            i += 1;
        }
    }
    found
}

fn skip_group_string(chars: &[char], mut i: usize) -> usize {
    i += 1;
    while i < chars.len() && chars[i] != '"' {
        if chars[i] == '\\' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// `a="x",b=~"$v"` into the selector.
fn parse_matchers(body: &str, selector: &mut Selector) {
    for matcher in body.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let at = matcher
            .find(['=', '!'])
            .unwrap_or_else(|| panic!("matcher without an operator: {matcher}"));
        let label = matcher[..at].trim().to_string();
        let rest = &matcher[at..];
        let value = rest
            .trim_start_matches(['=', '!', '~'])
            .trim()
            .trim_matches('"');
        if rest.starts_with("=\"") || rest.starts_with("= \"") {
            if value.contains('$') {
                selector.other_labels.push(label);
            } else {
                selector.equals.push((label, value.to_string()));
            }
        } else {
            selector.other_labels.push(label);
        }
    }
}

/// Every PromQL expression in the dashboard: panel targets and `label_values(...)` variables.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let mut queries = Vec::new();
    let mut stack = vec![dashboard];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(expr)) = map.get("expr") {
                    queries.push(expr.clone());
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(def) = var["definition"].as_str() {
            // label_values(METRIC, LABEL): the metric, as a selector with that label.
            let args = def
                .strip_prefix("label_values(")
                .and_then(|a| a.strip_suffix(')'))
                .unwrap_or_else(|| panic!("unexpected variable query {def}"));
            let (metric, label) = args.split_once(',').unwrap();
            queries.push(format!("{}{{{}=~\".+\"}}", metric.trim(), label.trim()));
        }
    }
    queries
}

/// Sample name -> label name -> values, from Prometheus text exposition.
fn exposed_samples(text: &str) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut samples: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = samples.entry(line[..name_end].to_string()).or_default();
        if !line[name_end..].starts_with('{') {
            continue;
        }
        // label="value" pairs up to the closing brace; values may hold escaped quotes.
        let mut rest = &line[name_end + 1..];
        while let Some(eq) = rest.find("=\"") {
            let label = rest[..eq].trim_start_matches(',').trim().to_string();
            let mut value = String::new();
            let mut chars = rest[eq + 2..].char_indices();
            let mut end = 0;
            while let Some((at, c)) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next().map(|(_, c)| c)),
                    '"' => {
                        end = eq + 2 + at + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            labels.entry(label).or_default().insert(value);
            rest = &rest[end..];
            if rest.starts_with('}') {
                break;
            }
        }
    }
    samples
}

#[test]
fn selectors_are_read_out_of_dashboard_promql() {
    let found = selectors(
        r#"histogram_quantile(0.99, sum by (le, command) (rate(tern_command_duration_seconds_bucket{instance=~"$instance",command="get"}[$__rate_interval]))) / on (instance) group_left sum(memcached_up) > bool 0.5"#,
    );
    assert_eq!(
        found,
        [
            Selector {
                metric: "tern_command_duration_seconds_bucket".into(),
                equals: vec![("command".into(), "get".into())],
                other_labels: vec!["instance".into()],
            },
            Selector {
                metric: "memcached_up".into(),
                ..Selector::default()
            },
        ]
    );
    let exposed =
        exposed_samples("# TYPE x counter\nx{a=\"1\",b=\"q\\\"uote\"} 3\nx{a=\"2\"} 1\ny 0\n");
    assert_eq!(exposed["x"]["a"], BTreeSet::from(["1".into(), "2".into()]));
    assert_eq!(exposed["x"]["b"], BTreeSet::from(["q\"uote".into()]));
    assert!(exposed["y"].is_empty());
}

#[test]
fn every_metric_the_dashboard_queries_is_in_terns_metrics() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../packaging/grafana/tern.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();

    let admin_port = free_port();
    let server = ServerProcess::tern(&["--admin-port", &admin_port.to_string()]);
    let mut conn = server.connect();
    conn.expect(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    conn.expect(b"get k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n");
    conn.expect(b"get missing\r\n", b"END\r\n");
    conn.expect(b"delete k\r\n", b"DELETED\r\n");
    let (status, _, metrics) = http_get(("127.0.0.1", admin_port), "/metrics");
    assert_eq!(status, 200);
    // A real parser accepts the page; the names come from the text itself, as Prometheus
    // stores them (prometheus_client would add `_total` to counters named without it).
    prometheus::parse(&metrics);
    let samples = exposed_samples(&metrics);

    let queries = dashboard_queries(&dashboard);
    let mut metrics_used = BTreeSet::new();
    for query in &queries {
        let found = selectors(query);
        assert!(!found.is_empty(), "no metric in {query}");
        for s in found {
            let labels = samples
                .get(&s.metric)
                .unwrap_or_else(|| panic!("{} (in {query}) is not in tern's /metrics", s.metric));
            for (label, value) in &s.equals {
                assert!(
                    labels
                        .get(label)
                        .is_some_and(|values| values.contains(value)),
                    "no {}{{{label}=\"{value}\"}} in tern's /metrics (in {query})",
                    s.metric
                );
            }
            // `instance` is the target label Prometheus adds when it scrapes.
            for label in s.other_labels.iter().filter(|l| *l != "instance") {
                assert!(
                    labels.contains_key(label),
                    "{} has no label {label} in tern's /metrics (in {query})",
                    s.metric
                );
            }
            metrics_used.insert(s.metric);
        }
    }
    // Throughput, hit ratio, latency, connections, memory, evictions: each is charted.
    for needed in [
        "tern_commands_total",
        "memcached_commands_total",
        "tern_command_duration_seconds_bucket",
        "memcached_current_connections",
        "memcached_current_bytes",
        "memcached_items_evicted_total",
    ] {
        assert!(
            metrics_used.contains(needed),
            "the dashboard charts no {needed}"
        );
    }
}
