//! The AF_XDP poll-mode relay backend with its own XDP program (issue 5).
//!
//! Empty until its issue lands: nothing here pretends to work yet.
#![forbid(unsafe_code)]
