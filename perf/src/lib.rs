//! The benchmark suite: netns testbed, packet generator and sink, side-by-side compare report (issues 3 and 5).
//!
//! Empty until its issue lands: nothing here pretends to work yet.
#![forbid(unsafe_code)]
