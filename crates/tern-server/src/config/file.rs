//! The `--config` TOML file: one key per acting option, named after the long flag with `_`.
//! config/tern.toml lists every key (crates/tern-server/tests/config_example.rs reads this
//! struct's fields and fails when the example lacks one).

use std::path::PathBuf;

use serde::Deserialize;

use super::ignored::Reason;
use super::{parse_mask, parse_size, split_list, tls, IoEngine, Protocol, Settings};

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    port: Option<u16>,
    listen: Option<OneOrMany>,
    udp_port: Option<u16>,
    unix_socket: Option<PathBuf>,
    unix_mask: Option<String>,
    memory_limit: Option<usize>,
    threads: Option<usize>,
    conn_limit: Option<usize>,
    max_reqs_per_event: Option<usize>,
    listen_backlog: Option<i32>,
    protocol: Option<Protocol>,
    max_item_size: Option<Size>,
    disable_evictions: Option<bool>,
    disable_cas: Option<bool>,
    lock_memory: Option<bool>,
    enable_largepages: Option<bool>,
    enable_shutdown: Option<bool>,
    disable_flush_all: Option<bool>,
    disable_dumping: Option<bool>,
    disable_watch: Option<bool>,
    prefix_delimiter: Option<String>,
    idle_timeout: Option<u64>,
    read_buf_mem_limit: Option<u64>,
    maxconns_fast: Option<bool>,
    hashpower: Option<u32>,
    verbose: Option<u8>,
    daemon: Option<bool>,
    user: Option<String>,
    pidfile: Option<PathBuf>,
    memory_file: Option<PathBuf>,
    takeover_socket: Option<PathBuf>,
    admin_port: Option<u16>,
    hotkey_sample_rate: Option<u32>,
    hotkey_window: Option<u64>,
    eviction: Option<String>,
    pin: Option<String>,
    numa_node: Option<usize>,
    enable_ssl: Option<bool>,
    ssl_chain_cert: Option<PathBuf>,
    ssl_key: Option<PathBuf>,
    ssl_ca_cert: Option<PathBuf>,
    ssl_verify_mode: Option<u8>,
    ssl_keyformat: Option<String>,
    ssl_ciphers: Option<String>,
    ssl_min_version: Option<String>,
    ssl_session_cache: Option<bool>,
    ssl_wbuf_size: Option<usize>,
    tls_handshake_timeout: Option<u64>,
    auth_file: Option<PathBuf>,
    enable_sasl: Option<bool>,
    io_engine: Option<IoEngine>,
    ext_path: Option<OneOrMany>,
    ext_page_size: Option<u32>,
    ext_wbuf_size: Option<u32>,
    ext_threads: Option<u32>,
    ext_item_size: Option<u32>,
    ext_item_age: Option<u32>,
    ext_low_ttl: Option<u32>,
    ext_recache_rate: Option<u32>,
    ext_compact_under: Option<u32>,
    ext_drop_under: Option<u32>,
    ext_max_frag: Option<f64>,
    ext_drop_unread: Option<bool>,
    ext_max_sleep: Option<u32>,
    slab_automove_freeratio: Option<f64>,
}

#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

impl FileConfig {
    pub(super) fn parse(text: &str) -> anyhow::Result<FileConfig> {
        Ok(toml::from_str(text)?)
    }

    pub(super) fn names_port(&self) -> bool {
        self.port.is_some()
    }
}

impl Settings {
    pub(super) fn apply_file(&mut self, f: FileConfig) -> anyhow::Result<()> {
        macro_rules! take {
            ($($field:ident => $target:ident),* $(,)?) => {
                $(if let Some(v) = f.$field { self.$target = v; })*
            };
        }
        take!(
            port => port, udp_port => udp_port, memory_limit => memory_limit_mb,
            threads => threads, conn_limit => conn_limit,
            max_reqs_per_event => max_reqs_per_event, listen_backlog => listen_backlog,
            protocol => protocol, disable_evictions => disable_evictions,
            disable_cas => disable_cas, lock_memory => lock_memory,
            enable_largepages => enable_largepages, enable_shutdown => enable_shutdown,
            disable_flush_all => disable_flush_all, disable_dumping => dumping_disabled,
            disable_watch => watch_disabled, idle_timeout => idle_timeout_secs,
            maxconns_fast => maxconns_fast, verbose => verbose, daemon => daemon,
            hotkey_sample_rate => hotkey_sample_rate, hotkey_window => hotkey_window_secs,
            io_engine => io_engine,
        );
        if f.admin_port.is_some() {
            self.admin_port = f.admin_port;
        }
        if let Some(mb) = f.read_buf_mem_limit {
            self.read_buf_mem_limit = mb << 20;
        }
        if f.hashpower.is_some() {
            self.hashpower = f.hashpower;
        }
        if let Some(delimiter) = &f.prefix_delimiter {
            self.set_prefix_delimiter(delimiter)?;
        }
        self.apply_placement(f.eviction.as_deref(), f.pin.as_deref(), f.numa_node)?;
        if let Some(listen) = f.listen {
            self.listen = match listen {
                OneOrMany::One(s) => split_list(&s),
                OneOrMany::Many(v) => v.iter().flat_map(|s| split_list(s)).collect(),
            };
        }
        if let Some(path) = f.unix_socket {
            self.unix_socket = Some(path);
        }
        if let Some(mask) = f.unix_mask {
            self.unix_mask = parse_mask(&mask)?;
        }
        if let Some(size) = f.max_item_size {
            self.max_item_size = match size {
                Size::Bytes(n) => n as usize,
                Size::Text(t) => parse_size(&t)?,
            };
        }
        if let Some(user) = f.user {
            self.user = Some(user);
        }
        if let Some(pidfile) = f.pidfile {
            self.pidfile = Some(pidfile);
        }
        if let Some(path) = f.memory_file {
            self.memory_file = Some(path);
        }
        if f.auth_file.is_some() {
            self.auth_file = f.auth_file;
        }
        if let Some(on) = f.enable_sasl {
            self.enable_sasl = on;
        }
        let tls = &mut self.tls;
        if let Some(on) = f.enable_ssl {
            tls.enabled = on;
        }
        for (path, target) in [
            (f.ssl_chain_cert, &mut tls.chain_cert),
            (f.ssl_key, &mut tls.key),
            (f.ssl_ca_cert, &mut tls.ca_cert),
        ] {
            if path.is_some() {
                *target = path;
            }
        }
        if let Some(mode) = f.ssl_verify_mode {
            tls.verify_mode = tls::parse_verify_mode(&mode.to_string())?;
        }
        if let Some(format) = &f.ssl_keyformat {
            tls.keyformat = tls::parse_keyformat(format)?;
        }
        if f.ssl_ciphers.is_some() {
            tls.ciphers = f.ssl_ciphers;
        }
        if let Some(version) = &f.ssl_min_version {
            tls.min_version = tls::TlsVersion::parse(version)?;
        }
        if let Some(on) = f.ssl_session_cache {
            tls.session_cache = on;
        }
        if let Some(kb) = f.ssl_wbuf_size {
            tls.wbuf_size = tls::parse_wbuf_kb(&kb.to_string())?;
        }
        if let Some(secs) = f.tls_handshake_timeout {
            tls.handshake_timeout_secs = secs;
        }
        if let Some(path) = f.takeover_socket {
            self.takeover_socket = Some(path);
        }
        if let Some(paths) = f.ext_path {
            let paths = match paths {
                OneOrMany::One(s) => vec![s],
                OneOrMany::Many(v) => v,
            };
            for path in paths {
                if self.flash.add_path(&path)?.is_some() {
                    self.ignore("ext_path's bucket", Reason::FlashBucket);
                }
            }
        }
        let flash = &mut self.flash;
        macro_rules! take_flash {
            ($($field:ident => $target:expr),* $(,)?) => {
                $(if let Some(v) = f.$field { $target = v; })*
            };
        }
        take_flash!(
            ext_page_size => flash.page_size_mb, ext_wbuf_size => flash.wbuf_size_mb,
            ext_threads => flash.threads, ext_item_size => flash.knobs.item_size,
            ext_item_age => flash.knobs.item_age, ext_low_ttl => flash.knobs.low_ttl,
            ext_recache_rate => flash.knobs.recache_rate,
            ext_compact_under => flash.knobs.compact_under,
            ext_drop_under => flash.knobs.drop_under, ext_max_frag => flash.knobs.max_frag,
            ext_drop_unread => flash.knobs.drop_unread,
            ext_max_sleep => flash.knobs.max_sleep_us,
        );
        if let Some(ratio) = f.slab_automove_freeratio {
            self.set_slab_automove_freeratio(ratio);
        }
        Ok(())
    }
}
