//! The store's error: a configuration it cannot lay out, a heap it cannot map or lock, or a
//! memory file it cannot open or reserve. A module of its own, below both the heap (which fails
//! with it) and the settings (`config`, which need the segments and so the heap): with either,
//! the two would import each other.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid store configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Lock(String),
    /// The memory file (`-e`) cannot be opened, sized or reserved; the message names it.
    #[error("{0}")]
    MemoryFile(String),
    /// A flash file (`ext_path`) cannot be opened, sized or locked; the message names it.
    #[error("{0}")]
    Flash(String),
}
