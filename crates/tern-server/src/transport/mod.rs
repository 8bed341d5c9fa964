//! Transport: how bytes come and go. Listening sockets and client streams (plain, TLS,
//! io_uring's), the epoll and io_uring worker loops, a connection's buffers and backpressure,
//! the authentication gate a connection's first bytes pass, and UDP. It hands requests to the
//! wire formats; it must not import `startup`.

pub mod auth;
pub mod buffers;
pub mod conn;
pub mod net;
pub mod stream;
pub mod tls;
pub mod udp;
pub mod uring;
pub mod worker;
