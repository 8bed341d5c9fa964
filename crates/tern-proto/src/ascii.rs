//! The classic ASCII (text) protocol.
