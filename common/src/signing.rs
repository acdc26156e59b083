//! Standard Webhooks v1 signatures: HMAC-SHA256 over `{webhook-id}.{webhook-timestamp}.{body}`,
//! keyed with the decoded secret, sent as `webhook-signature: v1,<base64>`. While a rotation's
//! transition window is open the header carries two signatures, new then old, separated by
//! exactly one space. The signed bytes are the exact bytes sent.

use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::domain::WebhookSecret;

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &WebhookSecret, msg_id: &str, timestamp: i64, body: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = HmacSha256::new_from_slice(secret.key_bytes()).expect("HMAC takes any key length");
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// One signature, `v1,<base64>`.
pub fn sign(secret: &WebhookSecret, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    format!("v1,{}", STANDARD.encode(mac(secret, msg_id, timestamp, body)))
}

/// The `webhook-signature` header value: one signature per secret, in the order given
/// (current first), separated by one space.
pub fn signature_header(secrets: &[&WebhookSecret], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets.iter().map(|s| sign(s, msg_id, timestamp, body)).collect::<Vec<_>>().join(" ")
}

/// Whether any `v1` signature in `header` was made with `secret` over these bytes.
/// Comparison is constant-time. (Receivers should also bound the timestamp's age.)
pub fn verify(secret: &WebhookSecret, msg_id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
    let expected = mac(secret, msg_id, timestamp, body);
    header
        .split(' ')
        .filter_map(|sig| sig.strip_prefix("v1,"))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .any(|candidate| candidate.ct_eq(&expected).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    // The test vector published with the Standard Webhooks specification.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const MSG_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TIMESTAMP: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn secret() -> WebhookSecret {
        WebhookSecret::parse(SECRET).expect("valid secret")
    }

    #[test]
    fn signing_matches_the_standard_webhooks_test_vector() {
        assert_eq!(sign(&secret(), MSG_ID, TIMESTAMP, BODY), SIGNATURE);
    }

    #[test]
    fn the_test_vector_verifies_and_any_change_breaks_it() {
        assert!(verify(&secret(), MSG_ID, TIMESTAMP, BODY, SIGNATURE));
        assert!(!verify(&secret(), MSG_ID, TIMESTAMP + 1, BODY, SIGNATURE));
        assert!(!verify(&secret(), "msg_other", TIMESTAMP, BODY, SIGNATURE));
        assert!(!verify(&secret(), MSG_ID, TIMESTAMP, br#"{"test": 2432232315}"#, SIGNATURE));
        assert!(!verify(&WebhookSecret::generate(), MSG_ID, TIMESTAMP, BODY, SIGNATURE));
    }

    #[test]
    fn a_rotation_header_carries_new_then_old_and_both_verify() {
        let old = secret();
        let new = WebhookSecret::generate();
        let header = signature_header(&[&new, &old], MSG_ID, TIMESTAMP, BODY);
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], sign(&new, MSG_ID, TIMESTAMP, BODY));
        assert_eq!(parts[1], SIGNATURE);
        assert!(verify(&old, MSG_ID, TIMESTAMP, BODY, &header));
        assert!(verify(&new, MSG_ID, TIMESTAMP, BODY, &header));
    }

    #[test]
    fn signatures_of_another_version_are_ignored() {
        let v2 = SIGNATURE.replace("v1,", "v2,");
        assert!(!verify(&secret(), MSG_ID, TIMESTAMP, BODY, &v2));
    }
}
