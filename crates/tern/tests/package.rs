//! The Debian package, built by scripts/package.sh from this test build's binary and installed
//! with dpkg into a scratch root (`dpkg --root`; the maintainer scripts run outside it with
//! DPKG_ROOT set). Checks the files, the conffile, the service user, that the installed binary
//! serves with the installed config, that systemd accepts the units (`systemd-analyze verify`,
//! the template with a drop-in from `tern tune plan`) and rates them at least as hardened as
//! Debian's memcached.service, and that upgrade, remove and purge treat the config as Debian
//! users expect.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tern_testkit::{free_port, tern_bin, ServerProcess};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| {
        panic!("{cmd:?}: {e} (apt-get install dpkg-dev systemd; .ci/run does)")
    });
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `dpkg` acting on the scratch root, its maintainer scripts run outside it (there is no shell
/// inside), with dependencies the empty root cannot have forgiven.
fn dpkg(root: &Path, args: &[&str]) -> Output {
    run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .arg(format!("--log={}", root.join("dpkg.log").display()))
        .args([
            "--force-script-chrootless",
            "--force-depends",
            "--force-not-root",
        ])
        .args(args))
}

fn status(root: &Path) -> String {
    let out = Command::new("dpkg-query")
        .arg(format!(
            "--admindir={}",
            root.join("var/lib/dpkg").display()
        ))
        .args(["-W", "-f=${db:Status-Abbrev}", "tern"])
        .output()
        .unwrap();
    text(&out).trim().to_string()
}

/// `systemd-analyze security --offline`'s overall exposure (0 = locked down, 10 = exposed).
fn exposure(args: &[&str]) -> f64 {
    let out = run(Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .args(args));
    let text = text(&out);
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no exposure level in:\n{text}"));
    line.split(": ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the exposure in {line:?}"))
}

fn service_keys(unit: &str) -> Vec<String> {
    let section = unit
        .split("[Service]")
        .nth(1)
        .expect("a [Service] section")
        .split("\n[")
        .next()
        .unwrap();
    section
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim().to_string()))
        .collect()
}

#[test]
fn package_installs_serves_verifies_upgrades_and_purges() {
    let scratch = std::env::temp_dir().join(format!("tern-package-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let out_dir = scratch.join("out");
    let built = run(Command::new("bash")
        .arg(repo().join("scripts/package.sh"))
        .arg("--bin")
        .arg(tern_bin())
        .arg("--out")
        .arg(&out_dir)
        .args(["--compress", "none"]));
    let deb = PathBuf::from(text(&built).lines().last().unwrap().trim());
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        deb.file_name().unwrap().to_str().unwrap(),
        format!("tern_{version}_amd64.deb")
    );
    let fields = text(&run(Command::new("dpkg-deb")
        .arg("-f")
        .arg(&deb)
        .args(["Package", "Version", "Depends"])));
    assert!(fields.contains(&format!("Version: {version}")), "{fields}");
    assert!(
        fields.contains("libc6 (>= "),
        "dpkg-shlibdeps found no libc: {fields}"
    );

    let root = scratch.join("root");
    for dir in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    dpkg(&root, &["-i", deb.to_str().unwrap()]);
    assert_eq!(status(&root), "ii");

    for file in [
        "usr/bin/tern",
        "lib/systemd/system/tern.service",
        "lib/systemd/system/tern@.service",
        "usr/lib/sysusers.d/tern.conf",
        "usr/share/doc/tern/copyright",
        "usr/share/doc/tern/install.md",
        "usr/share/doc/tern/README.md",
        "usr/share/doc/tern/examples/tern.toml",
        "usr/share/tern/grafana/tern.json",
    ] {
        assert!(root.join(file).is_file(), "{file} is not installed");
    }
    for (file, marker) in [
        (
            "usr/share/bash-completion/completions/tern",
            "complete -F _tern",
        ),
        ("usr/share/zsh/vendor-completions/_tern", "#compdef tern"),
        (
            "usr/share/fish/vendor_completions.d/tern.fish",
            "complete -c tern",
        ),
    ] {
        let script = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(script.contains(marker), "{file} lacks {marker:?}");
    }
    for page in ["tern", "tern-serve", "tern-bench", "tern-tune", "tern-top"] {
        let path = root.join(format!("usr/share/man/man1/{page}.1.gz"));
        let roff = text(&run(Command::new("gzip").arg("-dc").arg(&path)));
        assert!(roff.contains(&format!(".TH {page} 1 ")), "{page}.1.gz");
    }

    // The config: a conffile, the repository's defaults except loopback-only listening.
    let config = root.join("etc/tern/tern.toml");
    let installed = std::fs::read_to_string(&config).unwrap();
    let repo_config = std::fs::read_to_string(repo().join("config/tern.toml")).unwrap();
    let loopback = "# The package listens on loopback only, as Debian's memcached does: set the \
                    addresses clients use.\nlisten = [\"127.0.0.1\"]";
    assert!(installed.contains(loopback), "{installed}");
    assert_eq!(
        installed.replace(loopback, "listen = [\"0.0.0.0\"]"),
        repo_config
    );
    let conffiles = text(&run(Command::new("dpkg-query")
        .arg(format!(
            "--admindir={}",
            root.join("var/lib/dpkg").display()
        ))
        .args(["-W", "-f=${Conffiles}", "tern"])));
    assert!(conffiles.contains(" /etc/tern/tern.toml "), "{conffiles}");
    // postinst made the service's user in the root it installed into.
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("tern:x:") && l.ends_with(":/nonexistent:/usr/sbin/nologin")),
        "{passwd}"
    );

    // The installed binary serves with the installed config (and only on loopback).
    let port = free_port();
    let mut serve = Command::new(root.join("usr/bin/tern"));
    serve
        .args(["serve", "--config"])
        .arg(&config)
        .args(["-p", &port.to_string()]);
    let server = ServerProcess::spawn(serve, port);
    assert!(server.connect().line("version\r\n").starts_with("VERSION "));
    drop(server);

    // systemd accepts both units, the template with the drop-ins `tern tune plan` writes. verify
    // resolves everything inside the root: give it the host's targets and kill, as on a system.
    let units = root.join("lib/systemd/system");
    for entry in std::fs::read_dir("/lib/systemd/system").unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "target") {
            std::fs::copy(&path, units.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy("/bin/kill", root.join("bin/kill")).unwrap();
    run(Command::new(root.join("usr/bin/tern"))
        .args(["tune", "plan", "--root"])
        .arg(repo().join("crates/tern-tune/tests/fixtures/xeon-e5-2620-2s"))
        .args(["--format", "systemd", "--out"])
        .arg(root.join("etc/systemd/system")));
    let verify = run(Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(format!("--root={}", root.display()))
        .args([
            "tern.service",
            "tern@0.service",
            "tern@1.service",
            "tern-irq-affinity.service",
        ]));
    // verify exits 0 on a line it ignores: any message is a failure here.
    let said = String::from_utf8_lossy(&verify.stderr);
    assert!(said.trim().is_empty(), "systemd-analyze verify:\n{said}");
    let drop_in = std::fs::read_to_string(
        root.join("etc/systemd/system/tern@1.service.d/tern-tune-plan.conf"),
    )
    .unwrap();
    assert!(drop_in.contains("NUMAMask=1"), "{drop_in}");

    // At least as hardened as Debian's memcached: every setting its unit has, and a lower (or
    // equal) exposure by systemd's own measure.
    let memcached_unit = Path::new("/lib/systemd/system/memcached.service");
    let memcached = std::fs::read_to_string(memcached_unit)
        .expect("Debian's memcached unit (apt-get install memcached; .ci/run does)");
    let tern_unit = std::fs::read_to_string(units.join("tern.service")).unwrap();
    let template = std::fs::read_to_string(units.join("tern@.service")).unwrap();
    for key in service_keys(&memcached) {
        if ["ExecStart", "PIDFile", "Restart"].contains(&key.as_str()) {
            continue;
        }
        for (name, unit) in [("tern.service", &tern_unit), ("tern@.service", &template)] {
            assert!(
                service_keys(unit).contains(&key),
                "{name} lacks memcached.service's {key}="
            );
        }
    }
    for unit in [&tern_unit, &template] {
        for key in [
            "Type=notify",
            "User=tern",
            "Restart=on-failure",
            "LimitNOFILE=",
            "ExecReload=",
        ] {
            assert!(unit.contains(key), "a unit lacks {key}");
        }
    }
    let root_arg = format!("--root={}", root.display());
    let theirs = exposure(&[memcached_unit.to_str().unwrap()]);
    for unit in ["tern.service", "tern@1.service"] {
        let ours = exposure(&[&root_arg, unit]);
        assert!(
            ours <= theirs,
            "{unit}'s exposure {ours} is above memcached.service's {theirs}"
        );
    }

    // Upgrade (here to the same version): a config the admin changed stays as it is, unasked.
    let changed = format!("{installed}# changed by the admin\n");
    std::fs::write(&config, &changed).unwrap();
    dpkg(&root, &["-i", deb.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), changed);

    // Remove keeps the config, purge deletes it.
    dpkg(&root, &["-r", "tern"]);
    assert!(!root.join("usr/bin/tern").exists());
    assert!(config.exists(), "remove deleted the conffile");
    assert_eq!(status(&root), "rc");
    dpkg(&root, &["-P", "tern"]);
    assert!(!config.exists(), "purge left the conffile");
    std::fs::remove_dir_all(&scratch).unwrap();
}
