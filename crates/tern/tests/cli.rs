//! The binary's entry points, run for real.

use std::process::Command;

#[test]
fn help_lists_every_subcommand() {
    let out = Command::new(tern_testkit::tern_bin())
        .arg("--help")
        .output()
        .expect("run tern --help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for sub in ["serve", "bench", "tune", "top", "completions"] {
        assert!(
            text.contains(sub),
            "`tern --help` does not list {sub}:\n{text}"
        );
    }
}

#[test]
fn unknown_subcommand_fails() {
    let out = Command::new(tern_testkit::tern_bin())
        .arg("frobnicate")
        .output()
        .expect("run tern frobnicate");
    assert!(!out.status.success());
}

fn tern(args: &[&str]) -> std::process::Output {
    let out = Command::new(tern_testkit::tern_bin())
        .args(args)
        .output()
        .expect("run tern");
    assert!(
        out.status.success(),
        "tern {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn completion_scripts_name_the_subcommands_and_bash_loads_its_own() {
    for (shell, marker) in [
        ("bash", "complete -F _tern"),
        ("zsh", "#compdef tern"),
        ("fish", "complete -c tern"),
    ] {
        let script = String::from_utf8(tern(&["completions", shell]).stdout).unwrap();
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for sub in ["serve", "bench", "tune", "top", "numa-node"] {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    // bash itself parses the script and registers the completion.
    let bash = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source <({} completions bash) && complete -p tern",
            tern_testkit::tern_bin().display()
        ))
        .output()
        .expect("run bash");
    assert!(
        String::from_utf8_lossy(&bash.stdout).contains("_tern"),
        "{bash:?}"
    );
}

#[test]
fn man_pages_for_every_command() {
    let dir = std::env::temp_dir().join(format!("tern-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    tern(&["man", dir.to_str().unwrap()]);
    for (page, says) in [
        ("tern", "tern\\-top(1)"),
        ("tern-serve", "\\-\\-numa\\-node"),
        ("tern-bench", "tern\\-bench"),
        ("tern-tune", "plan"),
        ("tern-tune-plan", "\\-\\-format"),
        ("tern-top", "\\-\\-interval"),
    ] {
        let text = std::fs::read_to_string(dir.join(format!("{page}.1")))
            .unwrap_or_else(|e| panic!("{page}.1: {e}"));
        assert!(
            text.contains(&format!("\n.TH {page} 1 ")),
            "{page}.1 has no man page header"
        );
        assert!(text.contains(says), "{page}.1 lacks {says:?}");
    }
    // Neither the hidden `man` nor clap's `help` gets a page.
    assert!(!dir.join("tern-man.1").exists());
    assert!(!dir.join("tern-help.1").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
