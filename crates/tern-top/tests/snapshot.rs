//! `tern top`'s frames, drawn into ratatui's `TestBackend` from canned samples and compared with
//! the text under tests/golden/. After a deliberate change, regenerate them with
//! `UPDATE_GOLDEN=1 cargo test -p tern-top --test snapshot` and review the diff.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use tern_top::model::{HotKey, Sample, ServerModel};
use tern_top::ui::{self, Action, App, SortKey};

const WIDTH: u16 = 100;
const HEIGHT: u16 = 34;

/// tern's latency buckets (128 ns doubling to ~67 ms, then +Inf), cumulative.
fn histogram(per_bucket: &[(usize, u64)]) -> Vec<(f64, u64)> {
    let mut counts = [0u64; 21];
    for &(bucket, n) in per_bucket {
        counts[bucket] += n;
    }
    let mut total = 0;
    (0..21)
        .map(|i| {
            total += counts[i];
            let bound = if i == 20 {
                f64::INFINITY
            } else {
                128e-9 * f64::from(1u32 << i)
            };
            (bound, total)
        })
        .collect()
}

/// A sample after `t` seconds of steady traffic: per second 900 gets (90% hits), 100 sets,
/// 10 deletes, and an eviction every other second.
fn tern_sample(t: u64) -> Sample {
    let stats = [
        ("uptime", (100 + t).to_string()),
        ("threads", "4".into()),
        ("cmd_get", (900 * t).to_string()),
        ("get_hits", (810 * t).to_string()),
        ("get_misses", (90 * t).to_string()),
        ("cmd_set", (100 * t).to_string()),
        ("delete_hits", (6 * t).to_string()),
        ("delete_misses", (4 * t).to_string()),
        ("curr_connections", (10 + t % 3).to_string()),
        ("total_connections", (20 + t).to_string()),
        ("curr_items", "48213".into()),
        ("bytes", (40 << 20).to_string()),
        ("limit_maxbytes", (64 << 20).to_string()),
        ("evictions", (t / 2).to_string()),
    ];
    let mut latency = BTreeMap::new();
    // Per second: gets mostly in the 8-16 µs bucket, 1% at 131 µs, 0.1% beyond the histogram.
    latency.insert(
        "get".to_string(),
        histogram(&[(7, 890 * t), (10, 9 * t), (20, t)]),
    );
    latency.insert("set".to_string(), histogram(&[(8, 100 * t)]));
    Sample {
        version: "1.6.18-tern-0.1.0".into(),
        stats: stats.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        latency,
        hot_keys: Some(vec![
            HotKey {
                key: "user:42".into(),
                requests_per_second: 5120.0,
            },
            HotKey {
                key: "session:\\x00ff".into(),
                requests_per_second: 480.5,
            },
        ]),
        admin_error: None,
    }
}

/// Debian's memcached: `stats` only, a quieter load.
fn memcached_sample(t: u64) -> Sample {
    let stats = [
        ("uptime", (5000 + t).to_string()),
        ("threads", "4".into()),
        ("cmd_get", (50 * t).to_string()),
        ("get_hits", (25 * t).to_string()),
        ("get_misses", (25 * t).to_string()),
        ("cmd_set", (25 * t).to_string()),
        ("incr_hits", (5 * t).to_string()),
        ("curr_connections", "3".into()),
        ("total_connections", "7".into()),
        ("curr_items", "900".into()),
        ("bytes", "123456".into()),
        ("limit_maxbytes", (64 << 20).to_string()),
        ("evictions", "0".into()),
    ];
    Sample {
        version: "1.6.18".into(),
        stats: stats.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        ..Sample::default()
    }
}

fn app() -> App {
    let mut tern = ServerModel::new("127.0.0.1:11211");
    let mut memcached = ServerModel::new("127.0.0.1:11311");
    for t in 0..=30 {
        let elapsed = Duration::from_secs(u64::from(t > 0));
        tern.push(tern_sample(t), elapsed);
        // Watched for the last 10 seconds only: its sparklines fill from the right.
        if t >= 20 {
            memcached.push(memcached_sample(t), elapsed);
        }
    }
    App::new(vec![memcached, tern], Duration::from_secs(1))
}

fn render(app: &App) -> String {
    let mut terminal = Terminal::new(TestBackend::new(WIDTH, HEIGHT)).unwrap();
    terminal.draw(|frame| ui::draw(frame, app)).unwrap();
    let buffer = terminal.backend().buffer();
    let mut text = String::new();
    for y in 0..HEIGHT {
        let line: String = (0..WIDTH)
            .map(|x| buffer.cell((x, y)).unwrap().symbol())
            .collect();
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

fn check_golden(file: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(file);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; generate it with UPDATE_GOLDEN=1", path.display()));
    assert!(
        expected == actual,
        "{} differs (UPDATE_GOLDEN=1 regenerates it):\n--- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

#[test]
fn tern_in_detail() {
    let mut app = app();
    // Sorted by ops/s, tern (1,010/s) comes before memcached (80/s); start on it.
    assert_eq!(app.order(), [1, 0]);
    app.selected = 1;
    let frame = render(&app);
    assert!(frame.contains("1.0k"), "{frame}");
    check_golden("tern.txt", &frame);
}

#[test]
fn keys_switch_sort_pause_and_quit() {
    let mut app = app();
    app.selected = 1;
    assert_eq!(app.handle_key(key(KeyCode::Tab)), Action::Continue);
    assert_eq!(app.selected, 0, "Tab moves to the next server in the table");
    assert_eq!(app.handle_key(key(KeyCode::Char('s'))), Action::Continue);
    assert_eq!(app.sort, SortKey::HitRatio);
    assert_eq!(app.order(), [1, 0], "tern hits 90%, memcached 50%");
    assert_eq!(app.handle_key(key(KeyCode::Char('p'))), Action::Continue);
    assert!(app.paused);
    check_golden("memcached-paused.txt", &render(&app));
    assert_eq!(app.handle_key(key(KeyCode::Char('p'))), Action::Resume);
    assert_eq!(app.handle_key(key(KeyCode::Char('-'))), Action::Reschedule);
    assert_eq!(app.interval, Duration::from_millis(500));
    assert_eq!(app.handle_key(key(KeyCode::Char('S'))), Action::Continue);
    assert_eq!(app.sort, SortKey::Ops);
    assert_eq!(app.handle_key(key(KeyCode::Char('q'))), Action::Quit);
    assert_eq!(
        app.handle_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
        Action::Quit
    );
}
