//! Request ids: a UUID v4 for every request (the `X-Request-Id` each response carries, and
//! the `request_id` of validation errors), drawn from `rand`'s thread RNG, which the
//! operating system's CSPRNG seeds. tower-http's `MakeRequestUuid` asks the kernel for each
//! one instead: a `getrandom` system call per request, ~1.5 % of the api's CPU under create
//! load.

use axum::http::{HeaderValue, Request};
use rand::Rng;
use tower_http::request_id::{MakeRequestId, RequestId};

/// Makes a random UUID v4 per request.
#[derive(Clone, Copy, Debug, Default)]
pub struct MakeRandomRequestId;

impl MakeRequestId for MakeRandomRequestId {
    fn make_request_id<B>(&mut self, _request: &Request<B>) -> Option<RequestId> {
        HeaderValue::from_bytes(&uuid_v4(rand::rng().random())).ok().map(RequestId::new)
    }
}

/// `random` as the text of a UUID v4 (RFC 9562): version 4, variant `10`, lowercase hex.
fn uuid_v4(mut random: [u8; 16]) -> [u8; 36] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    random[6] = (random[6] & 0x0f) | 0x40;
    random[8] = (random[8] & 0x3f) | 0x80;
    let mut text = [b'-'; 36];
    let mut at = 0;
    for (i, byte) in random.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        text[at] = HEX[usize::from(byte >> 4)];
        text[at + 1] = HEX[usize::from(byte & 0x0f)];
        at += 2;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_become_a_version_4_uuid() {
        let text = uuid_v4([0xff; 16]);
        assert_eq!(&text, b"ffffffff-ffff-4fff-bfff-ffffffffffff");
        let text =
            uuid_v4([0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]);
        assert_eq!(&text, b"00112233-4455-4677-8899-aabbccddeeff");
    }

    #[test]
    fn each_request_gets_a_different_id() {
        let request = Request::new(());
        let mut make = MakeRandomRequestId;
        let first = make.make_request_id(&request).expect("an id");
        let second = make.make_request_id(&request).expect("an id");
        assert_ne!(first.header_value(), second.header_value());
        assert_eq!(first.header_value().len(), 36);
    }
}
