//! Fuzz target: the bundle parser never panics, a bundle it accepts is walked to its
//! last byte, and writing its frames into a new bundle gives back the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ufrag_common::bundle::{Bundle, BundleWriter};
use ufrag_common::frame::FrameHeader;

fuzz_target!(|data: &[u8]| {
    let Ok(bundle) = Bundle::parse(data) else {
        return;
    };
    let mut out = vec![0u8; data.len()];
    let mut writer = BundleWriter::new(&mut out);
    let mut rewritable = true;
    for frame in bundle {
        // Each frame is its own: a bad one is the frame's problem, not the bundle's.
        match FrameHeader::parse(frame) {
            Ok((header, datagram)) => {
                let canonical = header.encoded_len() + datagram.len() == frame.len();
                rewritable &= canonical && writer.push(&header, datagram).is_ok();
            }
            Err(_) => rewritable = false,
        }
    }
    // A bundle of good frames in canonical form (no IPv4-mapped addresses, which are
    // written back as IPv4) rewrites to itself.
    if rewritable {
        assert_eq!(writer.finish(), Some(data));
    }
});
