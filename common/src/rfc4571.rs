//! RFC 4571 framing, as ICE over TCP (RFC 6544) uses it: each message on the stream is
//! preceded by its length in two bytes, big-endian. Splits a receive buffer into whole
//! messages in place, without copying, and writes a message's prefix.

/// The length prefix before each message.
pub const PREFIX_LEN: usize = 2;

/// A length prefix announced a message longer than the reader accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageTooLarge {
    /// The announced length.
    pub len: usize,
}

/// The first whole message at the start of `buffer`, and how many bytes it takes there
/// with its prefix; `Ok(None)` while the prefix or the message is still incomplete. A
/// prefix above `max` is an error at once, before its message arrives.
pub fn next_message(buffer: &[u8], max: usize) -> Result<Option<(&[u8], usize)>, MessageTooLarge> {
    let Some(&[high, low]) = buffer.get(..PREFIX_LEN) else {
        return Ok(None);
    };
    let len = usize::from(u16::from_be_bytes([high, low]));
    if len > max {
        return Err(MessageTooLarge { len });
    }
    Ok(buffer
        .get(PREFIX_LEN..PREFIX_LEN + len)
        .map(|message| (message, PREFIX_LEN + len)))
}

/// The prefix for a message of `len` bytes; `None` above 65,535, which RFC 4571 cannot
/// carry.
pub fn prefix(len: usize) -> Option<[u8; PREFIX_LEN]> {
    u16::try_from(len).ok().map(u16::to_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_splits_into_its_messages_and_keeps_the_partial_rest() {
        let mut stream = Vec::new();
        for message in [&b"abc"[..], b"", b"hello"] {
            stream.extend_from_slice(&prefix(message.len()).unwrap());
            stream.extend_from_slice(message);
        }
        stream.extend_from_slice(&[0, 4, b'x']);
        let mut at = 0;
        let mut messages = Vec::new();
        while let Some((message, taken)) = next_message(&stream[at..], 100).unwrap() {
            messages.push(message.to_vec());
            at += taken;
        }
        assert_eq!(messages, [&b"abc"[..], b"", b"hello"]);
        assert_eq!(&stream[at..], &[0, 4, b'x'], "the partial message stays");
        assert_eq!(next_message(&[0], 100), Ok(None), "half a prefix");
    }

    #[test]
    fn a_prefix_above_the_limit_is_refused_before_its_message_arrives() {
        assert_eq!(
            next_message(&[0, 101], 100),
            Err(MessageTooLarge { len: 101 })
        );
        assert_eq!(next_message(&[0, 100], 100), Ok(None));
        assert_eq!(prefix(65_536), None);
        assert_eq!(prefix(65_535), Some([0xff, 0xff]));
    }
}
