//! `--memcached-conf`: Debian's /etc/memcached.conf, read with the rules of the scripts that
//! turn it into memcached's command line (systemd-memcached-wrapper for memcached.service,
//! start-memcached for the init script): a `#` not after a backslash starts a comment, blank
//! lines are skipped, so are lines starting with `-d` or `-h` (the service manager runs the
//! daemon), `logfile PATH` is a directive of the scripts, and every other line holds flags, split
//! into words as the shell splits them (the scripts hand the joined lines to `sh`).

use std::path::Path;

use anyhow::{bail, Context};

use super::ignored::{Ignored, Reason};

/// A memcached.conf as memcached's command line, and what the scripts' rules skipped.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct MemcachedConf {
    pub words: Vec<String>,
    pub skipped: Vec<Ignored>,
}

pub(super) fn read(path: &Path) -> anyhow::Result<MemcachedConf> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --memcached-conf {}", path.display()))?;
    parse(&text).with_context(|| format!("in --memcached-conf {}", path.display()))
}

fn parse(text: &str) -> anyhow::Result<MemcachedConf> {
    let mut conf = MemcachedConf {
        words: Vec::new(),
        skipped: Vec::new(),
    };
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let line = without_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or(line);
        let skip = |reason| Ignored {
            name: format!("{first} in memcached.conf"),
            reason,
        };
        if line.starts_with("-d") || line.starts_with("-h") {
            conf.skipped.push(skip(Reason::ConfSkipped));
        } else if first == "logfile" {
            conf.skipped.push(skip(Reason::ConfLogfile));
        } else if !line.starts_with('-') {
            bail!("line {number}: `{first}` is neither a memcached flag nor `logfile`");
        } else {
            let words = shlex::split(line)
                .with_context(|| format!("line {number}: a quote is not closed: {line}"))?;
            conf.words.extend(words);
        }
    }
    Ok(conf)
}

/// The line up to its first `#` that no backslash escapes.
fn without_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let hash = (0..bytes.len()).find(|&i| bytes[i] == b'#' && (i == 0 || bytes[i - 1] != b'\\'));
    &line[..hash.unwrap_or(line.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        parse(text).unwrap().words
    }

    #[test]
    fn flags_comments_and_blank_lines() {
        let text = "# a comment\n\n-m 64\n  -p 11211   # the port\n-l 127.0.0.1,::1\n\
                    -o modern,idle_timeout=60\n-vv\n";
        assert_eq!(
            words(text),
            [
                "-m",
                "64",
                "-p",
                "11211",
                "-l",
                "127.0.0.1,::1",
                "-o",
                "modern,idle_timeout=60",
                "-vv"
            ]
        );
    }

    #[test]
    fn quotes_and_escaped_hashes_are_the_shells() {
        assert_eq!(
            words("-s '/run/my cache.sock'\n-D \\#\n-P \"/run/a b.pid\"\n"),
            ["-s", "/run/my cache.sock", "-D", "#", "-P", "/run/a b.pid"]
        );
        let err = parse("-m 64\n-s '/run/x\n").unwrap_err();
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
    }

    #[test]
    fn daemon_help_and_logfile_lines_are_skipped_and_named() {
        let conf = parse("-d\nlogfile /var/log/memcached.log\n-h\n-m 64\n").unwrap();
        assert_eq!(conf.words, ["-m", "64"]);
        let skipped: Vec<(&str, Reason)> = conf
            .skipped
            .iter()
            .map(|i| (i.name.as_str(), i.reason))
            .collect();
        assert_eq!(
            skipped,
            [
                ("-d in memcached.conf", Reason::ConfSkipped),
                ("logfile in memcached.conf", Reason::ConfLogfile),
                ("-h in memcached.conf", Reason::ConfSkipped),
            ]
        );
    }

    #[test]
    fn other_directives_are_refused_with_their_line() {
        let err = parse("-m 64\ncachesize 64\n").unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("line 2") && text.contains("cachesize"),
            "{text}"
        );
    }
}
