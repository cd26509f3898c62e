//! Fuzz target: the frame header parser never panics, the payload is the tail of the
//! input, and whatever parses re-emits to a header that parses to the same addresses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ufrag_common::frame::{FrameHeader, MAX_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok((header, payload)) = FrameHeader::parse(data) {
        assert!(data.ends_with(payload) && payload.len() < data.len());
        let len = header.encoded_len();
        let mut out = [0u8; MAX_HEADER_LEN];
        assert_eq!(header.emit(&mut out), Ok(len));
        let mut reframed = out[..len].to_vec();
        reframed.extend_from_slice(payload);
        let (again, _) = FrameHeader::parse(&reframed).expect("emitted header parses");
        assert_eq!(again, header);
    }
});
