//! The view: what the keys do ([`App::handle_key`]) and how a frame is drawn ([`draw`]), with
//! no terminal of its own, so a test draws into ratatui's `TestBackend`.

use std::time::Duration;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Gauge, Paragraph, RenderDirection, Row, Sparkline, Table};
use ratatui::Frame;

use crate::model::ServerModel;

/// The shortest and longest refresh intervals `+` and `-` reach.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
const MAX_INTERVAL: Duration = Duration::from_secs(60);

/// What the servers table is sorted by (`s` cycles forward, `S` back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Ops,
    HitRatio,
    Connections,
    Memory,
    Evictions,
    Address,
}

impl SortKey {
    const ALL: [SortKey; 6] = [
        SortKey::Ops,
        SortKey::HitRatio,
        SortKey::Connections,
        SortKey::Memory,
        SortKey::Evictions,
        SortKey::Address,
    ];

    pub fn label(self) -> &'static str {
        match self {
            SortKey::Ops => "ops/s",
            SortKey::HitRatio => "hit ratio",
            SortKey::Connections => "connections",
            SortKey::Memory => "memory",
            SortKey::Evictions => "evictions/s",
            SortKey::Address => "address",
        }
    }

    fn step(self, forward: bool) -> SortKey {
        let i = SortKey::ALL.iter().position(|&k| k == self).unwrap_or(0);
        let n = SortKey::ALL.len();
        SortKey::ALL[if forward {
            (i + 1) % n
        } else {
            (i + n - 1) % n
        }]
    }
}

/// What the loop does after a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Continue,
    Quit,
    /// Unpaused: take a sample now, as a new baseline.
    Resume,
    /// The interval changed: the next sample is due one new interval from now.
    Reschedule,
}

/// Everything on screen.
pub struct App {
    pub servers: Vec<ServerModel>,
    /// Index into `servers` of the one shown in detail.
    pub selected: usize,
    pub sort: SortKey,
    pub paused: bool,
    pub interval: Duration,
}

impl App {
    pub fn new(servers: Vec<ServerModel>, interval: Duration) -> App {
        App {
            servers,
            selected: 0,
            sort: SortKey::Ops,
            paused: false,
            interval,
        }
    }

    pub fn handle_key(&mut self, key: KeyEvent) -> Action {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
            KeyCode::Char('c') if ctrl => Action::Quit,
            KeyCode::Char('p') | KeyCode::Char(' ') => {
                self.paused = !self.paused;
                if self.paused {
                    Action::Continue
                } else {
                    Action::Resume
                }
            }
            KeyCode::Char('s') => {
                self.sort = self.sort.step(true);
                Action::Continue
            }
            KeyCode::Char('S') => {
                self.sort = self.sort.step(false);
                Action::Continue
            }
            KeyCode::Tab | KeyCode::Right | KeyCode::Down | KeyCode::Char('j' | 'l') => {
                self.move_selection(true);
                Action::Continue
            }
            KeyCode::BackTab | KeyCode::Left | KeyCode::Up | KeyCode::Char('k' | 'h') => {
                self.move_selection(false);
                Action::Continue
            }
            KeyCode::Char('+') => {
                self.interval = (self.interval * 2).min(MAX_INTERVAL);
                Action::Reschedule
            }
            KeyCode::Char('-') => {
                self.interval = (self.interval / 2).max(MIN_INTERVAL);
                Action::Reschedule
            }
            _ => Action::Continue,
        }
    }

    /// Moves to the next or previous server in the table's order.
    fn move_selection(&mut self, forward: bool) {
        let order = self.order();
        let n = order.len();
        let at = order.iter().position(|&i| i == self.selected).unwrap_or(0);
        self.selected = order[if forward {
            (at + 1) % n
        } else {
            (at + n - 1) % n
        }];
    }

    /// Indexes of `servers` in the table's order: largest first, addresses A to Z.
    pub fn order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.servers.len()).collect();
        let key = |m: &ServerModel| -> f64 {
            let rates = m.rates.as_ref();
            match self.sort {
                SortKey::Ops => rates.map_or(0.0, |r| r.total),
                SortKey::HitRatio => rates.and_then(|r| r.hit_ratio).unwrap_or(-1.0),
                SortKey::Connections => m.stat_u64("curr_connections") as f64,
                SortKey::Memory => m.memory_ratio().unwrap_or(0.0),
                SortKey::Evictions => rates.map_or(0.0, |r| r.evictions),
                SortKey::Address => 0.0,
            }
        };
        order.sort_by(|&a, &b| {
            let (a, b) = (&self.servers[a], &self.servers[b]);
            key(b).total_cmp(&key(a)).then_with(|| a.addr.cmp(&b.addr))
        });
        order
    }
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, app: &App) {
    let servers_height = app.servers.len().min(8) as u16 + 3;
    let [header, servers, detail, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(servers_height),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    draw_header(frame, header, app);
    draw_servers(frame, servers, app);
    if let Some(server) = app.servers.get(app.selected) {
        draw_detail(frame, detail, server);
    }
    frame.render_widget(
        Paragraph::new(
            "q quit  p pause  s/S sort  Tab/←→ server  +/- interval".fg(Color::DarkGray),
        ),
        footer,
    );
}

fn draw_header(frame: &mut Frame, area: Rect, app: &App) {
    let mut spans = vec![
        Span::styled("tern top", Style::new().bold()),
        Span::raw(format!(
            "  {} server{}, every {}, sorted by {}",
            app.servers.len(),
            if app.servers.len() == 1 { "" } else { "s" },
            humantime::format_duration(app.interval),
            app.sort.label()
        )),
    ];
    if app.paused {
        spans.push(Span::styled(
            "  PAUSED",
            Style::new().bold().fg(Color::Yellow),
        ));
    }
    frame.render_widget(Line::from(spans), area);
}

fn draw_servers(frame: &mut Frame, area: Rect, app: &App) {
    let rows = app.order().into_iter().map(|i| {
        let m = &app.servers[i];
        let marker = if i == app.selected { "▶" } else { " " };
        let rates = m.rates.as_ref();
        let mut row = Row::new(vec![
            Cell::from(marker),
            Cell::from(m.addr.clone()),
            Cell::from(m.kind()),
            Cell::from(rates.map_or("-".into(), |r| si(r.total))),
            Cell::from(percent(rates.and_then(|r| r.hit_ratio))),
            Cell::from(m.stat_u64("curr_connections").to_string()),
            Cell::from(percent(m.memory_ratio())),
            Cell::from(rates.map_or("-".into(), |r| si(r.evictions))),
            Cell::from(if m.error.is_some() { "unreachable" } else { "" }),
        ]);
        if i == app.selected {
            row = row.style(Style::new().add_modifier(Modifier::REVERSED));
        }
        row
    });
    let header = Row::new([
        "", "server", "kind", "ops/s", "hit", "conns", "memory", "evict/s", "",
    ])
    .style(Style::new().bold());
    let table = Table::new(
        rows,
        [
            Constraint::Length(1),
            Constraint::Length(22),
            Constraint::Length(18),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(7),
            Constraint::Length(8),
            Constraint::Min(0),
        ],
    )
    .header(header)
    .block(Block::bordered().title(" servers "));
    frame.render_widget(table, area);
}

fn draw_detail(frame: &mut Frame, area: Rect, m: &ServerModel) {
    let title = format!(
        " {} · {} · up {} · {} threads ",
        m.addr,
        m.kind(),
        humantime::format_duration(Duration::from_secs(m.stat_u64("uptime"))),
        m.stat_u64("threads")
    );
    let block = Block::bordered().title(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [top, sparks, bottom] = Layout::vertical([
        Constraint::Length(10),
        Constraint::Length(4),
        Constraint::Min(0),
    ])
    .areas(inner);
    let [commands, summary] =
        Layout::horizontal([Constraint::Length(30), Constraint::Min(0)]).areas(top);
    draw_commands(frame, commands, m);
    draw_summary(frame, summary, m);
    draw_sparklines(frame, sparks, m);
    let [latency, hot] =
        Layout::horizontal([Constraint::Length(50), Constraint::Min(0)]).areas(bottom);
    draw_latency(frame, latency, m);
    draw_hot_keys(frame, hot, m);
}

fn draw_commands(frame: &mut Frame, area: Rect, m: &ServerModel) {
    let mut by_command = m
        .rates
        .as_ref()
        .map(|r| r.by_command.clone())
        .unwrap_or_default();
    // Busiest first; the order of the table otherwise (get, set, ...) breaks ties.
    by_command.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total = m.rates.as_ref().map_or(0.0, |r| r.total);
    let rows = by_command.iter().map(|&(command, rate)| {
        let share = if total > 0.0 { rate / total } else { 0.0 };
        Row::new([command.to_string(), si(rate), percent(Some(share))])
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(7),
        ],
    )
    .header(Row::new(["command", "ops/s", "share"]).style(Style::new().bold()))
    .block(Block::bordered().title(" commands "));
    frame.render_widget(table, area);
}

fn draw_summary(frame: &mut Frame, area: Rect, m: &ServerModel) {
    let block = Block::bordered().title(" summary ");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let rates = m.rates.as_ref();
    let gets = m.stat_u64("get_hits") + m.stat_u64("get_misses");
    let since_start = (gets > 0).then(|| m.stat_u64("get_hits") as f64 / gets as f64);
    let mut lines = vec![
        Line::from(format!(
            "hit ratio    {} (since start {})",
            percent(rates.and_then(|r| r.hit_ratio)),
            percent(since_start)
        )),
        Line::from(format!(
            "connections  {} open, {}/s new, {} in all",
            m.stat_u64("curr_connections"),
            rates.map_or("-".into(), |r| si(r.new_connections)),
            m.stat_u64("total_connections")
        )),
        Line::from(format!(
            "items        {}",
            si(m.stat_u64("curr_items") as f64)
        )),
        Line::from(format!(
            "memory       {} of {}",
            bytes(m.stat_u64("bytes")),
            bytes(m.stat_u64("limit_maxbytes"))
        )),
        Line::from(format!(
            "evictions    {}/s, {} in all",
            rates.map_or("-".into(), |r| si(r.evictions)),
            si(m.stat_u64("evictions") as f64)
        )),
    ];
    if let Some(error) = &m.error {
        lines.push(Line::from(error.clone().fg(Color::Red)));
    }
    let [text, gauge] = Layout::vertical([Constraint::Min(0), Constraint::Length(1)]).areas(inner);
    frame.render_widget(Paragraph::new(lines), text);
    let ratio = m.memory_ratio().unwrap_or(0.0).clamp(0.0, 1.0);
    frame.render_widget(
        Gauge::default()
            .ratio(ratio)
            .label(format!("memory {}", percent(Some(ratio))))
            .gauge_style(Style::new().fg(Color::Cyan)),
        gauge,
    );
}

fn draw_sparklines(frame: &mut Frame, area: Rect, m: &ServerModel) {
    let h = &m.history;
    let last = |s: &std::collections::VecDeque<u64>| s.back().copied();
    let series = [
        (
            format!(
                " ops/s {} ",
                last(&h.ops).map_or("-".into(), |v| si(v as f64))
            ),
            &h.ops,
            None,
        ),
        (
            format!(
                " hit % {} ",
                last(&h.hit_ratio).map_or("-".into(), |v| v.to_string())
            ),
            &h.hit_ratio,
            Some(100),
        ),
        (
            format!(
                " conns {} ",
                last(&h.connections).map_or("-".into(), |v| v.to_string())
            ),
            &h.connections,
            None,
        ),
        (
            format!(
                " evict/s {} ",
                last(&h.evictions).map_or("-".into(), |v| si(v as f64))
            ),
            &h.evictions,
            None,
        ),
    ];
    let areas = Layout::horizontal([Constraint::Ratio(1, 4); 4]).split(area);
    for ((title, data, max), &area) in series.iter().zip(areas.iter()) {
        // The newest point at the right edge, older ones to its left, as time runs rightwards.
        let width = area.width.saturating_sub(2) as usize;
        let newest_first: Vec<u64> = data.iter().rev().take(width).copied().collect();
        let mut spark = Sparkline::default()
            .data(&newest_first)
            .direction(RenderDirection::RightToLeft)
            .block(Block::bordered().title(title.clone()))
            .style(Style::new().fg(Color::Green));
        if let Some(max) = max {
            spark = spark.max(*max);
        }
        frame.render_widget(spark, area);
    }
}

fn draw_latency(frame: &mut Frame, area: Rect, m: &ServerModel) {
    let block = Block::bordered().title(" latency, last interval ");
    if !m.has_latency() {
        frame.render_widget(Paragraph::new(without_admin(m)).block(block), area);
        return;
    }
    let rows = m.latency.iter().map(|(command, p)| {
        let cells: [String; 4] = match p {
            Some(p) => {
                let bound = |seconds: f64| micros(seconds, p.ceiling);
                [
                    si(p.requests as f64),
                    bound(p.p50),
                    bound(p.p99),
                    bound(p.p999),
                ]
            }
            None => ["0".into(), "-".into(), "-".into(), "-".into()],
        };
        Row::new(std::iter::once(command.to_string()).chain(cells))
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(9),
        ],
    )
    .header(Row::new(["", "reqs", "p50 ≤", "p99 ≤", "p99.9 ≤"]).style(Style::new().bold()))
    .block(block);
    frame.render_widget(table, area);
}

fn draw_hot_keys(frame: &mut Frame, area: Rect, m: &ServerModel) {
    let block = Block::bordered().title(" hot keys ");
    let Some(keys) = m.hot_keys() else {
        frame.render_widget(Paragraph::new(without_admin(m)).block(block), area);
        return;
    };
    if keys.is_empty() {
        frame.render_widget(Paragraph::new("none sampled yet").block(block), area);
        return;
    }
    let rows = keys
        .iter()
        .map(|k| Row::new([k.key.clone(), si(k.requests_per_second)]));
    let table = Table::new(rows, [Constraint::Min(10), Constraint::Length(8)])
        .header(Row::new(["key", "req/s"]).style(Style::new().bold()))
        .block(block);
    frame.render_widget(table, area);
}

/// Why a panel that needs tern's admin endpoint is empty.
fn without_admin(m: &ServerModel) -> Line<'static> {
    if let Some(err) = m.admin_error() {
        Line::from(format!("admin endpoint: {err}").fg(Color::Red))
    } else if m.is_tern() {
        Line::from("no admin endpoint: start tern with --admin-port".fg(Color::DarkGray))
    } else {
        Line::from("tern's admin endpoint only".fg(Color::DarkGray))
    }
}

/// 950, 12.3k, 4.56M.
pub fn si(value: f64) -> String {
    if value < 1000.0 {
        if value == value.round() {
            format!("{value:.0}")
        } else {
            format!("{value:.1}")
        }
    } else if value < 1e6 {
        format!("{:.1}k", value / 1e3)
    } else if value < 1e9 {
        format!("{:.2}M", value / 1e6)
    } else {
        format!("{:.2}G", value / 1e9)
    }
}

fn percent(ratio: Option<f64>) -> String {
    ratio.map_or("-".into(), |r| format!("{:.1}%", r * 100.0))
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A latency bound in seconds, in µs or ms; beyond the histogram's `ceiling` only "more".
fn micros(seconds: f64, ceiling: f64) -> String {
    let text = |s: f64| {
        if s < 1e-3 {
            format!("{:.0} µs", s * 1e6)
        } else {
            format!("{:.1} ms", s * 1e3)
        }
    };
    if seconds.is_infinite() {
        format!("> {}", text(ceiling))
    } else {
        text(seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(si(950.0), "950");
        assert_eq!(si(2.5), "2.5");
        assert_eq!(si(12_345.0), "12.3k");
        assert_eq!(si(4_560_000.0), "4.56M");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(64 << 20), "64.0 MiB");
        assert_eq!(micros(0.000262144, 0.067108864), "262 µs");
        assert_eq!(micros(0.002097152, 0.067108864), "2.1 ms");
        assert_eq!(micros(f64::INFINITY, 0.067108864), "> 67.1 ms");
        assert_eq!(percent(Some(0.9512)), "95.1%");
    }
}
