//! Fuzz target: RFC 4571 message splitting as an ICE-TCP reader does it, a stream
//! arriving in chunks of any size into a bounded receive buffer whose partial rest is
//! kept for the next read. Never panics, and the messages (and the point where a too
//! long prefix stops the stream) are exactly those of splitting the whole stream at once;
//! every message with its prefix is the stream's bytes in order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ufrag_common::rfc4571::{PREFIX_LEN, next_message, prefix};

/// What splitting gives: the messages, and whether a too long prefix ended it.
#[derive(Debug, PartialEq, Eq)]
struct Split {
    messages: Vec<Vec<u8>>,
    refused: bool,
}

fn split_at_once(stream: &[u8], max: usize) -> Split {
    let mut split = Split {
        messages: Vec::new(),
        refused: false,
    };
    let mut at = 0;
    loop {
        match next_message(&stream[at..], max) {
            Ok(Some((message, taken))) => {
                assert_eq!(taken, PREFIX_LEN + message.len());
                assert!(message.len() <= max);
                assert_eq!(&stream[at..at + PREFIX_LEN], &prefix(message.len()).unwrap());
                assert_eq!(&stream[at + PREFIX_LEN..at + taken], message);
                split.messages.push(message.to_vec());
                at += taken;
            }
            Ok(None) => return split,
            Err(too_large) => {
                assert!(too_large.len > max);
                split.refused = true;
                return split;
            }
        }
    }
}

fn split_in_chunks(stream: &[u8], max: usize, chunks: &[u8]) -> Split {
    let mut inbox = vec![0u8; 2 * (PREFIX_LEN + max)];
    let mut len = 0;
    let mut read = 0;
    let mut split = Split {
        messages: Vec::new(),
        refused: false,
    };
    for &chunk in chunks.iter().cycle() {
        let want = (usize::from(chunk) + 1).min(inbox.len() - len).min(stream.len() - read);
        if want == 0 {
            return split;
        }
        inbox[len..len + want].copy_from_slice(&stream[read..read + want]);
        len += want;
        read += want;
        let mut at = 0;
        loop {
            match next_message(&inbox[at..len], max) {
                Ok(Some((message, taken))) => {
                    split.messages.push(message.to_vec());
                    at += taken;
                }
                Ok(None) => break,
                Err(_) => {
                    split.refused = true;
                    return split;
                }
            }
        }
        inbox.copy_within(at..len, 0);
        len -= at;
    }
    split
}

fuzz_target!(|data: &[u8]| {
    let [limit, chunk_count, rest @ ..] = data else {
        return;
    };
    let max = usize::from(*limit) * 4;
    let chunk_count = usize::from(*chunk_count % 8) + 1;
    let (chunks, stream) = rest.split_at(chunk_count.min(rest.len()));
    if chunks.is_empty() {
        return;
    }
    assert_eq!(
        split_in_chunks(stream, max, chunks),
        split_at_once(stream, max),
        "chunked reads split as the whole stream does"
    );
});
