//! `tern top` as a person uses it: in a real terminal (tmux), watching a real tern with its
//! admin endpoint and Debian's memcached, driven by keys (send-keys) and read off the screen
//! (capture-pane). Needs the built binary (`cargo build -p tern`) and tmux (`.ci/run` installs it).

use std::io::Write;
use std::net::TcpStream;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_testkit::{free_port, tern_bin, ServerProcess, PATIENCE};

/// A tmux server of the test's own (`-L`), so no user session is touched; killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new() -> Tmux {
        Tmux {
            socket: format!("tern-top-test-{}", std::process::id()),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs (apt-get install tmux; .ci/run installs it)")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// Waits until the screen shows everything in `wanted`; returns that screen.
    fn wait_for(&self, wanted: &[&str]) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let screen = self.screen();
            if wanted.iter().all(|w| screen.contains(w)) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {wanted:?}; it shows:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn keys(&self, keys: &str) {
        assert!(self.run(&["send-keys", "-t", "top", keys]).status.success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

#[test]
fn watches_tern_and_memcached_and_answers_keys() {
    let admin_port = free_port();
    let tern = ServerProcess::tern(&[
        "--admin-port",
        &admin_port.to_string(),
        "--hotkey-sample-rate",
        "1",
    ]);
    let memcached = ServerProcess::memcached(&[]);

    // Steady gets of one key while the view runs, so each interval has rates, latency and a hot
    // key; bounded, and stopped at the end of the test.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        let port = tern.port;
        std::thread::spawn(move || {
            let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
            conn.write_all(b"set user:hot42 0 0 2\r\nhi\r\n").unwrap();
            let deadline = Instant::now() + 3 * PATIENCE;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                // Replies are not read: 50 small ones per round stay far below the socket buffers.
                conn.write_all(&b"get user:hot42\r\n".repeat(50)).unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    let tmux = Tmux::new();
    let tern_addr = format!("127.0.0.1:{}", tern.port);
    let memcached_addr = format!("127.0.0.1:{}", memcached.port);
    // The shell stays after tern top exits, to show its exit status.
    let command = format!(
        "{} top {tern_addr} {memcached_addr} --interval 200ms; \
         echo tern top exited with status $?; sleep 60",
        tern_bin().display()
    );
    let started = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "110",
        "-y",
        "40",
        &command,
    ]);
    assert!(started.status.success(), "{started:?}");
    // tern, found with its admin endpoint through `stats settings`: rates, latency, hot key.
    let screen = tmux.wait_for(&[
        &format!("{tern_addr} · tern "),
        "memcached 1.6",
        "user:hot42",
        "µs",
    ]);
    assert!(screen.contains("sorted by ops/s"), "{screen}");

    // Tab: memcached in detail, whose panels say what only tern has.
    tmux.keys("Tab");
    tmux.wait_for(&[
        &format!("{memcached_addr} · memcached"),
        "tern's admin endpoint only",
    ]);
    tmux.keys("s");
    tmux.wait_for(&["sorted by hit ratio"]);
    tmux.keys("p");
    tmux.wait_for(&["PAUSED"]);
    tmux.keys("p");
    let deadline = Instant::now() + PATIENCE;
    while tmux.screen().contains("PAUSED") {
        assert!(Instant::now() < deadline, "p did not resume");
        std::thread::sleep(Duration::from_millis(50));
    }

    // q: tern top restores the terminal and exits 0; the shell after it says so on screen.
    tmux.keys("q");
    tmux.wait_for(&["tern top exited with status 0"]);
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
}
