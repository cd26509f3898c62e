//! The production relay backend: SO_REUSEPORT workers pinned to cores, mio, batched recvmmsg/sendmmsg (issue 3).
//!
//! Empty until its issue lands: nothing here pretends to work yet.
#![forbid(unsafe_code)]
