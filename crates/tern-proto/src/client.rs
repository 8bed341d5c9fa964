//! Client side of the protocols, for `tern bench`: encode requests, parse replies.
