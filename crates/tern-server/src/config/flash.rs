//! memcached's extstore options (`-o ext_*`, the `--ext-*` flags, the `ext_*` TOML keys): the
//! flash tier the store keeps items in beyond `-m`, on when `ext_path` names a file. Read and
//! checked as memcached 1.6.45 reads and checks them (`storage_read_config`,
//! `storage_conf_parse`, `storage_check_config`, `storage_init`), with its messages.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::bail;
use tern_store::{FlashConfig, FlashFile, FlashSettings, DEFAULT_READ_DEPTH};

/// The flash tier's options as given; [`FlashOptions::store_config`] turns them into the
/// store's.
#[derive(Clone, Debug, PartialEq)]
pub struct FlashOptions {
    /// `ext_path=FILE:SIZE`, in the order given; the flash tier is on when there is one.
    pub files: Vec<FlashFile>,
    /// `ext_page_size`, in megabytes.
    pub page_size_mb: u32,
    /// `ext_wbuf_size`, in megabytes.
    pub wbuf_size_mb: u32,
    /// `ext_threads`.
    pub threads: u32,
    /// `ext_item_size` ... `ext_max_sleep`; `compact_under` 0 means "derive it" (see
    /// [`FlashOptions::store_config`]).
    pub knobs: FlashSettings,
    /// `slab_automove_freeratio`: tern has no slab classes to keep free memory in, so it is
    /// only shown in `stats settings`.
    pub slab_automove_freeratio: f64,
}

impl Default for FlashOptions {
    /// memcached's defaults (`storage_init_config`).
    fn default() -> FlashOptions {
        let store = FlashConfig::default();
        FlashOptions {
            files: Vec::new(),
            page_size_mb: (store.page_size >> 20) as u32,
            wbuf_size_mb: (store.wbuf_size >> 20) as u32,
            threads: store.io_threads as u32,
            knobs: store.knobs,
            slab_automove_freeratio: 0.01,
        }
    }
}

/// The buckets memcached lets an `ext_path` name as the one its freed pages go to.
const BUCKETS: &[&str] = &[
    "compact",
    "lowttl",
    "chunked",
    "default",
    "coldcompact",
    "old",
];

impl FlashOptions {
    /// Adds one `ext_path` value, `FILE:SIZE[:BUCKET]`; returns the bucket if one is named
    /// (tern's files form one pool and take none, so the caller warns).
    pub(super) fn add_path(&mut self, value: &str) -> anyhow::Result<Option<String>> {
        let fail = |why: &str| anyhow::anyhow!("-o ext_path={value}: {why}");
        // strtok: `:`-separated, empty fields skipped.
        let mut fields = value.split(':').filter(|f| !f.is_empty());
        let path = fields
            .next()
            .ok_or_else(|| fail("failed to parse ext_path argument"))?;
        let size = fields.next().ok_or_else(|| {
            fail("must supply size to ext_path, ie: ext_path=/f/e:64m (M|G|T|P supported)")
        })?;
        let unit = size.chars().last().map(|c| c.to_ascii_lowercase());
        let multiplier: u64 = match unit {
            Some('m') => 1 << 20,
            Some('g') => 1 << 30,
            Some('t') => 1 << 40,
            Some('p') => 1 << 50,
            _ => {
                return Err(fail(
                    "must supply size to ext_path, ie: ext_path=/f/e:64m (m|g|t|p supported)",
                ))
            }
        };
        let number = atoi(&size[..size.len() - 1]);
        if number < 0 {
            return Err(fail("the size cannot be negative"));
        }
        let bytes = (number as u64)
            .checked_mul(multiplier)
            .ok_or_else(|| fail("the size is too large"))?;
        let bucket = match fields.next() {
            Some(name) if BUCKETS.contains(&name) => Some(name.to_string()),
            Some(name) => return Err(fail(&format!("Unknown extstore bucket: {name}"))),
            None => None,
        };
        self.files.push(FlashFile {
            path: PathBuf::from(path),
            bytes,
        });
        Ok(bucket)
    }

    /// memcached's `storage_check_config`, with tern's own refusals: nothing when no
    /// `ext_path` is given, as memcached.
    pub(super) fn validate(&self, max_item_size: usize, udp_port: u16) -> anyhow::Result<()> {
        if self.files.is_empty() {
            return Ok(());
        }
        // memcached divides by these (or runs no I/O thread): it crashes or hangs on 0.
        for (name, value) in [
            ("ext_page_size", self.page_size_mb),
            ("ext_wbuf_size", self.wbuf_size_mb),
            ("ext_threads", self.threads),
        ] {
            if value == 0 {
                bail!("-o {name}=0: must be at least 1");
            }
        }
        let wbuf_bytes = self.wbuf_bytes();
        if max_item_size > wbuf_bytes {
            bail!(
                "-I (item_size_max: {max_item_size}) cannot be larger than ext_wbuf_size: \
                 {wbuf_bytes}"
            );
        }
        if udp_port != 0 {
            bail!("Cannot use UDP with extstore enabled (-U 0 to disable)");
        }
        for file in &self.files {
            if self.pages(file) == 0 {
                bail!(
                    "-o ext_path={}: supplied ext_path has zero size, cannot use (smaller than \
                     one {} MB page)",
                    file.path.display(),
                    self.page_size_mb
                );
            }
        }
        Ok(())
    }

    /// The store's flash tier, `None` without an `ext_path`.
    pub fn store_config(&self) -> Option<FlashConfig> {
        let last = self.files.last()?;
        let mut knobs = self.knobs;
        if knobs.compact_under == 0 {
            // memcached's storage_init: 1% of the pages of the ext_path given last (the head
            // of its list), at least 1, for both, a drop_under given or not.
            let share = ((self.pages(last) as f64 * 0.01) as u32).max(1);
            knobs.compact_under = share;
            knobs.drop_under = share;
        }
        Some(FlashConfig {
            files: self.files.clone(),
            page_size: (self.page_size_mb as usize) << 20,
            wbuf_size: self.wbuf_bytes(),
            io_threads: self.threads as usize,
            read_depth: read_depth(&self.files),
            knobs,
        })
    }

    /// `ext_wbuf_size` in bytes, as `stats settings` shows it.
    pub fn wbuf_bytes(&self) -> usize {
        (self.wbuf_size_mb as usize) << 20
    }

    /// Whole pages `file` holds.
    fn pages(&self, file: &FlashFile) -> u64 {
        file.bytes / (u64::from(self.page_size_mb) << 20)
    }
}

/// Reads the workers may keep in flight on the flash files: half the request queue
/// (`queue/nr_requests` in sysfs) of each device the files are on, the other half left to the
/// I/O threads' reads and writes, so that a worker's submission never waits for a request;
/// `DEFAULT_READ_DEPTH` where no file's device has one (no block device, no sysfs). On
/// 2026-11-27's 2-core VM (256 requests, 128 in the device) a worker without this limit slept
/// in the kernel for 11-16 % of its time with 512 reads asked, and carried no more.
fn read_depth(files: &[FlashFile]) -> usize {
    let mut devices = Vec::new();
    for file in files {
        // A file not made yet is on its directory's device.
        let dir = file.path.parent().filter(|d| !d.as_os_str().is_empty());
        let meta = std::fs::metadata(&file.path)
            .or_else(|_| std::fs::metadata(dir.unwrap_or(Path::new("."))));
        if let Ok(meta) = meta {
            if !devices.contains(&meta.dev()) {
                devices.push(meta.dev());
            }
        }
    }
    let depth: usize = devices
        .into_iter()
        .filter_map(queue_requests)
        .map(|requests| (requests / 2).max(1))
        .sum();
    if depth == 0 {
        DEFAULT_READ_DEPTH
    } else {
        depth
    }
}

/// The request queue's size of the block device `dev`, or of the disk holding it when it is
/// a partition.
fn queue_requests(dev: u64) -> Option<usize> {
    let base = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
    ["queue/nr_requests", "../queue/nr_requests"]
        .iter()
        .find_map(|queue| {
            let text = std::fs::read_to_string(format!("{base}/{queue}")).ok()?;
            text.trim().parse().ok()
        })
}

/// C's `atoi` over 64 bits: white space, a sign, the digits up to the first other character; 0
/// without digits.
fn atoi(text: &str) -> i64 {
    let t = text.trim_start();
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let n = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |n, d| {
            n.saturating_mul(10).saturating_add(i64::from(d - b'0'))
        });
    if negative {
        -n
    } else {
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(value: &str) -> anyhow::Result<(FlashFile, Option<String>)> {
        let mut options = FlashOptions::default();
        let bucket = options.add_path(value)?;
        Ok((options.files.remove(0), bucket))
    }

    fn error(value: &str) -> String {
        format!("{:#}", path(value).unwrap_err())
    }

    #[test]
    fn ext_path_as_memcached_reads_it() {
        let file = |p: &str, bytes: u64| FlashFile {
            path: PathBuf::from(p),
            bytes,
        };
        assert_eq!(path("/f:64m").unwrap(), (file("/f", 64 << 20), None));
        assert_eq!(path("/f:2G").unwrap().0, file("/f", 2 << 30));
        assert_eq!(path("/f:1t").unwrap().0, file("/f", 1 << 40));
        assert_eq!(path("/f:1P").unwrap().0, file("/f", 1 << 50));
        // atoi: digits up to the first other character; none is 0 (refused later, zero size).
        assert_eq!(path("/f:1.5g").unwrap().0, file("/f", 1 << 30));
        assert_eq!(path("/f:xG").unwrap().0, file("/f", 0));
        // strtok skips empty fields.
        assert_eq!(path("::/f::8m").unwrap().0, file("/f", 8 << 20));
        assert_eq!(
            path("/f:64m:compact").unwrap(),
            (file("/f", 64 << 20), Some("compact".into()))
        );
        assert!(error("/f:1GB").contains("(m|g|t|p supported)"));
        assert!(error("/f").contains("(M|G|T|P supported)"));
        assert!(error("").contains("failed to parse ext_path argument"));
        assert!(error("/f:1g:bogus").contains("Unknown extstore bucket: bogus"));
        assert!(error("/f:-1g").contains("negative"));
    }

    #[test]
    fn checks_as_memcached_checks_them() {
        let mut options = FlashOptions::default();
        assert!(options.validate(8 << 20, 11211).is_ok(), "no ext_path");
        options.add_path("/f:1g").unwrap();
        options.validate(1 << 20, 0).unwrap();
        let err = |o: &FlashOptions, item: usize, udp: u16| {
            format!("{:#}", o.validate(item, udp).unwrap_err())
        };
        assert!(err(&options, 8 << 20, 0)
            .contains("-I (item_size_max: 8388608) cannot be larger than ext_wbuf_size: 4194304"));
        assert!(err(&options, 1 << 20, 11211).contains("Cannot use UDP with extstore enabled"));
        options.add_path("/g:32m").unwrap();
        assert!(err(&options, 1 << 20, 0).contains("supplied ext_path has zero size"));
        options.files.pop();
        options.add_path("/g:0g").unwrap();
        assert!(err(&options, 1 << 20, 0).contains("/g: supplied ext_path has zero size"));
        options.files.pop();
        options.page_size_mb = 0;
        assert!(err(&options, 1 << 20, 0).contains("ext_page_size=0"));
    }

    #[test]
    fn the_store_config_derives_compact_and_drop_under_as_memcached() {
        let mut options = FlashOptions::default();
        assert_eq!(options.store_config(), None);
        // 1% of the last file's pages: 16 GiB of 64 MiB pages is 256, so 2.
        options.add_path("/small:1g").unwrap();
        options.add_path("/big:16g").unwrap();
        options.knobs.drop_under = 9;
        let config = options.store_config().unwrap();
        assert_eq!(
            (config.knobs.compact_under, config.knobs.drop_under),
            (2, 2)
        );
        assert_eq!((config.page_size, config.wbuf_size), (64 << 20, 4 << 20));
        assert_eq!((config.io_threads, config.files.len()), (1, 2));
        // At least 1.
        options.files.pop();
        let config = options.store_config().unwrap();
        assert_eq!(
            (config.knobs.compact_under, config.knobs.drop_under),
            (1, 1)
        );
        // Given: both kept.
        options.knobs.compact_under = 5;
        let config = options.store_config().unwrap();
        assert_eq!(
            (config.knobs.compact_under, config.knobs.drop_under),
            (5, 9)
        );
        assert_eq!(config.knobs.item_size, 512);
        assert_eq!(config.knobs.item_age, u32::MAX);
    }

    fn file(path: &str) -> FlashFile {
        FlashFile {
            path: PathBuf::from(path),
            bytes: 1 << 30,
        }
    }

    #[test]
    fn reads_in_flight_follow_the_devices_request_queues() {
        // No block device under /proc.
        assert_eq!(read_depth(&[file("/proc/tern-flash")]), DEFAULT_READ_DEPTH);
        let tmp = std::env::temp_dir();
        let dev = std::fs::metadata(&tmp).unwrap().dev();
        let here = tmp.join("tern-flash").display().to_string();
        let there = tmp.join("elsewhere").display().to_string();
        let expected = queue_requests(dev).map_or(DEFAULT_READ_DEPTH, |n| (n / 2).max(1));
        assert_eq!(read_depth(&[file(&here)]), expected);
        // Two files on one device share its queue.
        assert_eq!(read_depth(&[file(&here), file(&there)]), expected);
    }
}
