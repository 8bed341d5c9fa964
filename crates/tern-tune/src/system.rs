//! Machine-wide settings that decide whether a pinned layout performs: swap, huge pages, limits,
//! irqbalance, and NIC interrupt moderation. Read below a root like the topology.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::Result;
use serde::Serialize;

use crate::topology::{list_dir, read_optional};

/// An active swap area (/proc/swaps).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Swap {
    pub name: String,
    pub size_kib: u64,
    pub used_kib: u64,
}

/// A pool of reserved huge pages (/sys/kernel/mm/hugepages/hugepages-2048kB).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct HugePages {
    pub page_kib: u64,
    pub total: u64,
    pub free: u64,
}

/// The open-file limit (`Max open files` of /proc/self/limits, inherited by a tern started from
/// the same shell).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FileLimit {
    /// `None` is unlimited.
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// A NIC's interrupt moderation as `ethtool -c` reports it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Coalescing {
    Read {
        adaptive_rx: Option<bool>,
        rx_usecs: Option<u64>,
    },
    /// Not read, and why (ethtool missing, the driver does not support it, not this machine).
    Unknown { reason: String },
}

/// Settings of the machine below a root.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SystemState {
    /// PIDs of running irqbalance daemons.
    pub irqbalance_pids: Vec<u32>,
    pub swaps: Vec<Swap>,
    /// The bracketed mode of transparent_hugepage/enabled (`always`, `madvise`, `never`).
    pub thp: Option<String>,
    pub hugepages: Vec<HugePages>,
    pub somaxconn: Option<u64>,
    pub open_files: Option<FileLimit>,
    /// Interrupt moderation per NIC name.
    pub coalescing: BTreeMap<String, Coalescing>,
}

impl SystemState {
    /// Reads the settings below `root`. `ethtool -c` is asked only about the live machine
    /// (`root` is `/`): a fixture tree of another machine has no NIC to ask.
    pub fn read(root: &Path, nics: &[String]) -> Result<SystemState> {
        let mut irqbalance_pids = Vec::new();
        for entry in list_dir(&root.join("proc"))? {
            let Ok(pid) = entry.parse::<u32>() else {
                continue;
            };
            // A process may exit while we look; a vanished comm is simply not irqbalance.
            if let Ok(Some(comm)) = read_optional(root, &format!("proc/{pid}/comm")) {
                if comm == "irqbalance" {
                    irqbalance_pids.push(pid);
                }
            }
        }

        let swaps = read_optional(root, "proc/swaps")?
            .map(|text| parse_swaps(&text))
            .unwrap_or_default();

        let thp = read_optional(root, "sys/kernel/mm/transparent_hugepage/enabled")?
            .and_then(|text| bracketed(&text).map(str::to_string));

        let mut hugepages = Vec::new();
        for pool in list_dir(&root.join("sys/kernel/mm/hugepages"))? {
            let Some(page_kib) = pool
                .strip_prefix("hugepages-")
                .and_then(|s| s.strip_suffix("kB"))
                .and_then(|s| s.parse().ok())
            else {
                continue;
            };
            let number = |file: &str| -> Result<u64> {
                Ok(
                    read_optional(root, &format!("sys/kernel/mm/hugepages/{pool}/{file}"))?
                        .and_then(|t| t.parse().ok())
                        .unwrap_or(0),
                )
            };
            hugepages.push(HugePages {
                page_kib,
                total: number("nr_hugepages")?,
                free: number("free_hugepages")?,
            });
        }
        // Older kernels (and minimal fixtures) only have the default pool's count.
        if hugepages.is_empty() {
            if let Some(total) =
                read_optional(root, "proc/sys/vm/nr_hugepages")?.and_then(|t| t.parse().ok())
            {
                hugepages.push(HugePages {
                    page_kib: 2048,
                    total,
                    free: total,
                });
            }
        }

        let somaxconn =
            read_optional(root, "proc/sys/net/core/somaxconn")?.and_then(|t| t.parse().ok());
        let open_files = read_optional(root, "proc/self/limits")?.and_then(|t| parse_nofile(&t));

        let mut coalescing = BTreeMap::new();
        for nic in nics {
            let state = if root != Path::new("/") {
                Coalescing::Unknown {
                    reason: format!("not the live machine (root {})", root.display()),
                }
            } else {
                ethtool_coalescing(nic)
            };
            coalescing.insert(nic.clone(), state);
        }

        Ok(SystemState {
            irqbalance_pids,
            swaps,
            thp,
            hugepages,
            somaxconn,
            open_files,
            coalescing,
        })
    }

    /// Bytes reserved in huge pages, all pools.
    pub fn hugepages_reserved_mib(&self) -> u64 {
        self.hugepages
            .iter()
            .map(|p| p.total * p.page_kib / 1024)
            .sum()
    }
}

/// `always [madvise] never` -> `madvise`.
fn bracketed(text: &str) -> Option<&str> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(&text[start..end])
}

fn parse_swaps(text: &str) -> Vec<Swap> {
    text.lines()
        .skip(1) // header: Filename Type Size Used Priority
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            Some(Swap {
                name: fields.first()?.to_string(),
                size_kib: fields.get(2)?.parse().ok()?,
                used_kib: fields.get(3)?.parse().ok()?,
            })
        })
        .collect()
}

/// `Max open files            1024                 1048576              files`.
fn parse_nofile(limits: &str) -> Option<FileLimit> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut fields = line["Max open files".len()..].split_whitespace();
    let value = |f: Option<&str>| -> Option<Option<u64>> {
        match f? {
            "unlimited" => Some(None),
            n => n.parse().ok().map(Some),
        }
    };
    Some(FileLimit {
        soft: value(fields.next())?,
        hard: value(fields.next())?,
    })
}

fn ethtool_coalescing(nic: &str) -> Coalescing {
    match Command::new("ethtool").arg("-c").arg(nic).output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Coalescing::Unknown {
            reason: "ethtool is not installed (apt-get install ethtool)".to_string(),
        },
        Err(e) => Coalescing::Unknown {
            reason: format!("ethtool -c {nic}: {e}"),
        },
        Ok(out) if !out.status.success() => Coalescing::Unknown {
            reason: format!(
                "ethtool -c {nic}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        },
        Ok(out) => parse_ethtool_coalescing(&String::from_utf8_lossy(&out.stdout)),
    }
}

/// The lines of `ethtool -c` that matter here: `Adaptive RX: on  TX: off` and `rx-usecs: 3`.
pub(crate) fn parse_ethtool_coalescing(text: &str) -> Coalescing {
    let mut adaptive_rx = None;
    let mut rx_usecs = None;
    for line in text.lines() {
        if let Some(rest) = line.trim().strip_prefix("Adaptive RX:") {
            adaptive_rx = match rest.split_whitespace().next() {
                Some("on") => Some(true),
                Some("off") => Some(false),
                _ => None,
            };
        } else if let Some(rest) = line.trim().strip_prefix("rx-usecs:") {
            rx_usecs = rest.trim().parse().ok();
        }
    }
    Coalescing::Read {
        adaptive_rx,
        rx_usecs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thp_mode_is_the_bracketed_word() {
        assert_eq!(bracketed("always [madvise] never"), Some("madvise"));
        assert_eq!(bracketed("[always] madvise never"), Some("always"));
        assert_eq!(bracketed("always madvise never"), None);
    }

    #[test]
    fn swaps_skip_the_header() {
        let text = "Filename\tType\tSize\tUsed\tPriority\n/dev/sda2 partition 8388604 1024 -2\n";
        assert_eq!(
            parse_swaps(text),
            vec![Swap {
                name: "/dev/sda2".into(),
                size_kib: 8388604,
                used_kib: 1024
            }]
        );
        assert!(parse_swaps("Filename Type Size Used Priority\n").is_empty());
    }

    #[test]
    fn open_file_limit_from_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max open files            1024                 524288               files\n";
        assert_eq!(
            parse_nofile(text),
            Some(FileLimit {
                soft: Some(1024),
                hard: Some(524288)
            })
        );
        let unlimited = "Max open files            unlimited            unlimited            files";
        assert_eq!(
            parse_nofile(unlimited),
            Some(FileLimit {
                soft: None,
                hard: None
            })
        );
    }

    #[test]
    fn ethtool_coalescing_fields() {
        let text =
            "Coalesce parameters for eth2:\nAdaptive RX: on  TX: off\nstats-block-usecs: 0\n\
                    rx-usecs: 3\nrx-frames: 0\n";
        assert_eq!(
            parse_ethtool_coalescing(text),
            Coalescing::Read {
                adaptive_rx: Some(true),
                rx_usecs: Some(3)
            }
        );
        let off = "Adaptive RX: off  TX: off\nrx-usecs: 0\n";
        assert_eq!(
            parse_ethtool_coalescing(off),
            Coalescing::Read {
                adaptive_rx: Some(false),
                rx_usecs: Some(0)
            }
        );
        // virtio_net, as on a cloud VM (trimmed): adaptive off, no moderation.
        let virtio = "Coalesce parameters for eth0:\nAdaptive RX: off  TX: n/a\n\
                      stats-block-usecs: n/a\nsample-interval: n/a\n\nrx-usecs: 0\n\
                      rx-frames: 1\nrx-usecs-irq: n/a\n\ntx-usecs: 0\n";
        assert_eq!(
            parse_ethtool_coalescing(virtio),
            Coalescing::Read {
                adaptive_rx: Some(false),
                rx_usecs: Some(0)
            }
        );
        // Some drivers print n/a for what they do not support.
        assert_eq!(
            parse_ethtool_coalescing("Adaptive RX: n/a  TX: n/a\nrx-usecs: n/a\n"),
            Coalescing::Read {
                adaptive_rx: None,
                rx_usecs: None
            }
        );
    }
}
