//! `top`: a live table of every mapped disk, refreshed each interval.

use std::io::{self, IsTerminal};
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::{DefaultTerminal, Frame};

use crate::error::{Error, Result};
use crate::rates::{self, latency_cell, DiskRates, Sample};
use crate::sysfs::Sysfs;

/// The terminal in raw mode on the alternate screen, given back as it was however `top`
/// ends: a return, an error, or a panic (ratatui's hook restores it then).
struct Screen(DefaultTerminal);

impl Screen {
    fn enter() -> Result<Screen> {
        match ratatui::try_init() {
            Ok(t) => Ok(Screen(t)),
            Err(e) => {
                // Raw mode may be on although the alternate screen failed.
                let _ = ratatui::try_restore();
                Err(Error::Terminal(e))
            }
        }
    }

    fn draw(&mut self, view: &View) -> Result<()> {
        self.0
            .draw(|f| render(f, view))
            .map(drop)
            .map_err(Error::Terminal)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = ratatui::try_restore();
    }
}

/// What one frame shows.
pub struct View {
    pub rows: Vec<DiskRates>,
    pub interval: Duration,
    pub refresh: u64,
}

const HEADER: [&str; 11] = [
    "DEVICE",
    "NAME",
    "STATE",
    "VIA",
    "READ/s",
    "WRITE/s",
    "READ MB/s",
    "WRITE MB/s",
    "P50",
    "P99",
    "INFLIGHT",
];
const WIDTHS: [u16; 11] = [11, 14, 12, 5, 9, 9, 10, 11, 9, 9, 8];

fn cells(r: &DiskRates) -> [String; 11] {
    let num = |v: Option<f64>, prec: usize| v.map_or_else(|| "-".into(), |v| format!("{v:.prec$}"));
    [
        r.device.clone(),
        r.name.clone(),
        r.state.clone(),
        r.transport.clone().unwrap_or_else(|| "-".into()),
        num(r.read_iops, 0),
        num(r.write_iops, 0),
        num(r.read_mbs, 1),
        num(r.write_mbs, 1),
        latency_cell(r.p50),
        latency_cell(r.p99),
        r.inflight.map_or_else(|| "-".into(), |n| n.to_string()),
    ]
}

pub fn render(f: &mut Frame, view: &View) {
    let [title, body, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(
        Paragraph::new(format!(
            "rdmadiskctl top: every {} ms, refresh {}",
            view.interval.as_millis(),
            view.refresh
        ))
        .style(Style::new().add_modifier(Modifier::BOLD)),
        title,
    );
    if view.rows.is_empty() {
        f.render_widget(
            Paragraph::new("no rdmadisk disk is mapped").block(Block::bordered()),
            body,
        );
    } else {
        let header = Row::new(HEADER).style(Style::new().add_modifier(Modifier::REVERSED));
        let rows = view.rows.iter().map(|r| Row::new(cells(r)));
        let table = Table::new(rows, WIDTHS.map(Constraint::Length))
            .header(header)
            .block(Block::bordered());
        f.render_widget(table, body);
    }
    f.render_widget(
        Line::from(
            "q: quit   latency: I/O completed in the interval, both transports, log2 bucket bound",
        ),
        foot,
    );
}

/// Waits until `deadline`; `true` if the user asked to quit. A resize redraws at once.
fn wait(screen: &mut Screen, view: &View, deadline: Instant) -> Result<bool> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !event::poll(left).map_err(Error::Terminal)? {
            return Ok(false);
        }
        match event::read().map_err(Error::Terminal)? {
            Event::Key(k) if k.kind != KeyEventKind::Release => {
                // Raw mode turns Ctrl-C into a key: it must quit like `q`.
                let ctrl_c =
                    k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                    return Ok(true);
                }
            }
            Event::Resize(..) => screen.draw(view)?,
            _ => {}
        }
    }
}

pub fn run(sysfs: &Sysfs, interval: Duration, iterations: Option<u64>) -> Result<()> {
    // Fail before the screen is taken, so the message is not wiped with it.
    sysfs.check_loaded()?;
    if !io::stdout().is_terminal() {
        return Err(Error::Terminal(io::Error::other(
            "standard output is not a terminal (use `stats --json` in scripts)",
        )));
    }
    let mut screen = Screen::enter()?;
    let mut prev: Vec<Sample> = Vec::new();
    let mut refresh = 0u64;
    loop {
        let next = Instant::now() + interval;
        let samples = rates::sample_all(sysfs)?;
        refresh += 1;
        let view = View {
            rows: samples.iter().map(|s| rates::rates(&prev, s)).collect(),
            interval,
            refresh,
        };
        screen.draw(&view)?;
        prev = samples;
        if iterations.is_some_and(|n| refresh >= n) || wait(&mut screen, &view, next)? {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn screen_text(view: &View) -> String {
        let mut t = Terminal::new(TestBackend::new(120, 8)).unwrap();
        t.draw(|f| render(f, view)).unwrap();
        let buf = t.backend().buffer().clone();
        let mut s = String::new();
        for y in 0..buf.area.height {
            for x in 0..buf.area.width {
                s.push_str(buf[(x, y)].symbol());
            }
            s.push('\n');
        }
        s
    }

    #[test]
    fn the_table_shows_each_disk() {
        let row = DiskRates {
            device: "rdmadisk0".into(),
            name: "d1".into(),
            state: "live".into(),
            transport: Some("rdma".into()),
            read_iops: Some(4000.0),
            write_iops: None,
            read_mbs: Some(16.384),
            write_mbs: Some(0.0),
            p50: None,
            p99: None,
            inflight: Some(7),
        };
        let s = screen_text(&View {
            rows: vec![row],
            interval: Duration::from_millis(500),
            refresh: 2,
        });
        assert!(
            s.contains("rdmadiskctl top: every 500 ms, refresh 2"),
            "{s}"
        );
        assert!(s.contains("DEVICE"), "{s}");
        let line = s.lines().find(|l| l.contains("rdmadisk0")).unwrap();
        let words: Vec<&str> = line.trim_matches(['│', ' ']).split_whitespace().collect();
        assert_eq!(
            words,
            [
                "rdmadisk0",
                "d1",
                "live",
                "rdma",
                "4000",
                "-",
                "16.4",
                "0.0",
                "-",
                "-",
                "7"
            ]
        );
    }

    #[test]
    fn an_empty_table_says_so() {
        let s = screen_text(&View {
            rows: vec![],
            interval: Duration::from_millis(1000),
            refresh: 1,
        });
        assert!(s.contains("no rdmadisk disk is mapped"), "{s}");
    }
}
