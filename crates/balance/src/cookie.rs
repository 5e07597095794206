//! Persistence cookie tokens: the value of an inserted cookie that names a server.
//!
//! A token is the URL-safe base64 (no padding) of the first 12 bytes of
//! HMAC-SHA256(key, pool || 0x00 || server): 16 characters, all legal in a cookie value.
//! Invariants:
//!
//! - opaque: without the key a token says nothing about the server's name or address;
//! - tamper-evident: a client cannot compute the token of another server, so a forged or
//!   stale value simply matches none of the tokens the engine precomputes per server
//!   (decoding is a lookup, never a parse);
//! - stable: the same key, pool and server always give the same token, so cookies survive
//!   reloads, and instances sharing a key (derived from a configured secret) agree.
//!
//! 96 bits of MAC make guessing another server's token hopeless; the 0x00 separator keeps
//! ("ab", "c") and ("a", "bc") apart (names never contain NUL).
//!
//! [`CookieKey::generate`] is the one place this crate reaches the operating system (for
//! randomness); the engine calls it once at start-up, never on the request path.

use aws_lc_rs::hmac;

/// Bytes of a [`CookieKey`].
pub const KEY_LEN: usize = 32;
/// Bytes of MAC kept in a token.
const MAC_LEN: usize = 12;
/// Characters of a token: 12 bytes are exactly 16 base64 characters.
pub const TOKEN_LEN: usize = MAC_LEN / 3 * 4;
/// Label mixed into keys derived from a secret, so they differ from any other use of it.
const DERIVE_LABEL: &[u8] = b"switchyard persistence cookie key v1";
/// The URL-safe base64 alphabet (RFC 4648 section 5).
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The operating system could not supply random bytes.
#[derive(Debug, thiserror::Error)]
#[error("no randomness available from the operating system for the cookie key")]
pub struct KeyError;

/// The secret that makes tokens unforgeable.
#[derive(Clone, PartialEq, Eq)]
pub struct CookieKey([u8; KEY_LEN]);

impl std::fmt::Debug for CookieKey {
    // Never print the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieKey(..)")
    }
}

impl CookieKey {
    /// A fresh random key from the operating system. Tokens then change at every
    /// restart, which resets stickiness; configure a secret to keep them.
    pub fn generate() -> Result<CookieKey, KeyError> {
        let mut bytes = [0u8; KEY_LEN];
        aws_lc_rs::rand::fill(&mut bytes).map_err(|_| KeyError)?;
        Ok(CookieKey(bytes))
    }

    /// A key derived from a configured secret (any length), so that tokens survive
    /// restarts and agree across instances configured alike.
    pub fn from_secret(secret: &[u8]) -> CookieKey {
        CookieKey(mac(DERIVE_LABEL, &[secret]))
    }

    /// A key with exactly these bytes (tests, or a key stored elsewhere).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> CookieKey {
        CookieKey(bytes)
    }
}

/// The cookie value that sends a client of `pool` to `server`: [`TOKEN_LEN`] URL-safe
/// base64 characters.
pub fn token(key: &CookieKey, pool: &str, server: &str) -> String {
    let full = mac(&key.0, &[pool.as_bytes(), &[0], server.as_bytes()]);
    encode(&full[..MAC_LEN])
}

/// HMAC-SHA256 of the concatenated `parts` under `key`.
fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut ctx = hmac::Context::with_key(&key);
    for part in parts {
        ctx.update(part);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.sign().as_ref());
    out
}

/// URL-safe base64 without padding.
fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        // A chunk of k bytes carries 8k bits: k + 1 characters of 6 bits each.
        for i in 0..=chunk.len() {
            let sextet = (n >> (18 - 6 * i)) & 0x3f;
            out.push(char::from(ALPHABET[sextet as usize]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> CookieKey {
        CookieKey::from_bytes([byte; KEY_LEN])
    }

    #[test]
    fn encoding_matches_rfc_4648_test_vectors() {
        let cases: [(&[u8], &str); 7] = [
            (b"", ""),
            (b"f", "Zg"),
            (b"fo", "Zm8"),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg"),
            (b"fooba", "Zm9vYmE"),
            (b"foobar", "Zm9vYmFy"),
        ];
        for (input, want) in cases {
            assert_eq!(encode(input), want);
        }
        // The two characters where URL-safe base64 differs from the standard alphabet.
        assert_eq!(encode(&[0xfb, 0xff, 0xbf]), "-_-_");
    }

    #[test]
    fn mac_matches_rfc_4231_test_case_2() {
        let got = mac(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        let hex: String = got.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, want);
    }

    #[test]
    fn tokens_are_stable_and_url_safe() {
        let a = token(&key(1), "web", "app-1");
        assert_eq!(a, token(&key(1), "web", "app-1"));
        assert_eq!(a.len(), TOKEN_LEN);
        assert!(a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{a}");
    }

    #[test]
    fn distinct_servers_pools_and_keys_give_distinct_tokens() {
        let k = key(1);
        let mut seen = std::collections::HashSet::new();
        for server in 0..200 {
            assert!(seen.insert(token(&k, "web", &format!("app-{server}"))));
        }
        assert!(seen.insert(token(&k, "api", "app-0")));
        assert!(seen.insert(token(&key(2), "web", "app-0")));
        // The separator keeps the pool/server boundary.
        assert_ne!(token(&k, "ab", "c"), token(&k, "a", "bc"));
    }

    #[test]
    fn tokens_reveal_nothing_of_the_server_name() {
        let k = key(7);
        for server in ["10.0.0.1:8080", "backend-alpha", "app-1", "abcdefghijklmnop"] {
            let t = token(&k, "web", server);
            assert!(!t.contains(server), "{t} contains {server}");
            for window in server.as_bytes().windows(4) {
                let window = std::str::from_utf8(window).unwrap_or("");
                assert!(!t.contains(window), "{t} contains {window:?} of {server}");
            }
        }
    }

    #[test]
    fn derived_keys_are_deterministic_and_secret_dependent() {
        assert_eq!(CookieKey::from_secret(b"s3cret"), CookieKey::from_secret(b"s3cret"));
        assert_ne!(CookieKey::from_secret(b"s3cret"), CookieKey::from_secret(b"s3cret!"));
        assert_eq!(format!("{:?}", CookieKey::from_secret(b"s3cret")), "CookieKey(..)");
    }

    #[test]
    fn generated_keys_differ() {
        let a = CookieKey::generate();
        let b = CookieKey::generate();
        assert!(matches!((&a, &b), (Ok(a), Ok(b)) if a != b));
    }
}
