//! The flash tier, as the store uses it (work in progress: the public surface first).

use std::time::Duration;

use super::Store;
use crate::mechanics::flash_config::{FlashKnobs, FlashPageInfo, FlashStats};

impl Store {
    /// The flash tier's knobs, which the `extstore` command changes; `None` without one.
    pub fn flash_knobs(&self) -> Option<&FlashKnobs> {
        None
    }

    /// The flash tier's counters and gauges; `None` without one.
    pub fn flash_stats(&self) -> Option<FlashStats> {
        None
    }

    /// Every flash page, in order (`stats extstore`).
    pub fn flash_pages(&self) -> Vec<FlashPageInfo> {
        Vec::new()
    }

    /// One pass of the flash tier's background work (write a full buffer, move idle items to
    /// flash, compact or free pages); returns how long its thread may sleep before the next.
    /// The server runs `FlashConfig::io_threads` threads calling it in a loop.
    pub fn flash_work(&self) -> Duration {
        Duration::from_secs(1)
    }
}
