//! Bearer tokens: read from `{"actor": "token", ...}` JSON (a value
//! `sha256:HEX` is the token's digest, so the file need not hold the token
//! itself), kept only as SHA-256 digests, and matched in constant time to
//! the actor they name.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{OmniError, Result};

pub struct Tokens {
    digests: Vec<([u8; 32], String)>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A token given by its digest: `sha256:` and 64 hex digits, as
/// `printf %s TOKEN | sha256sum` prints them.
pub const DIGEST_PREFIX: &str = "sha256:";

fn from_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Tokens {
    /// Parse the JSON object `text` (from `source`, named in errors).
    pub fn parse(text: &str, source: &str) -> Result<Self> {
        let bad = |why: String| OmniError::BadRequest(format!("tokens in {source}: {why}"));
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|e| bad(format!("not a JSON object ({e})")))?;
        let mut digests: Vec<([u8; 32], String)> = Vec::new();
        for (actor, token) in map {
            let token = token
                .as_str()
                .ok_or_else(|| bad(format!("the token of actor {actor:?} is not a string")))?;
            if actor.is_empty() || token.is_empty() {
                return Err(bad("an actor or a token is empty".into()));
            }
            let d = match token.strip_prefix(DIGEST_PREFIX) {
                Some(hex) => from_hex(hex).ok_or_else(|| {
                    bad(format!(
                        "the token of actor {actor:?} starts with {DIGEST_PREFIX:?} but is not 64 hex digits (a SHA-256 digest)"
                    ))
                })?,
                None => digest(token),
            };
            if let Some((_, other)) = digests.iter().find(|(o, _)| *o == d) {
                return Err(bad(format!(
                    "actors {other:?} and {actor:?} have the same token"
                )));
            }
            digests.push((d, actor));
        }
        if digests.is_empty() {
            return Err(bad("no tokens".into()));
        }
        Ok(Self { digests })
    }

    /// The actor whose token `presented` is. Every digest is compared, so
    /// the time taken says nothing about which one matched.
    pub fn actor(&self, presented: &str) -> Option<&str> {
        let d = digest(presented);
        let mut found = None;
        for (known, actor) in &self.digests {
            if bool::from(known.ct_eq(&d)) {
                found = Some(actor.as_str());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_actor_and_nothing_else_does() {
        let t = Tokens::parse(r#"{"alice": "s3cret", "bob": "other"}"#, "test").unwrap();
        assert_eq!(t.actor("s3cret"), Some("alice"));
        assert_eq!(t.actor("other"), Some("bob"));
        assert_eq!(t.actor("s3cre"), None);
        assert_eq!(t.actor(""), None);
    }

    #[test]
    fn a_token_may_be_given_by_its_digest() {
        // printf %s s3cret | sha256sum
        let hex = "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0";
        let text = format!(r#"{{"alice": "sha256:{hex}", "bob": "other"}}"#);
        let t = Tokens::parse(&text, "test").unwrap();
        assert_eq!(t.actor("s3cret"), Some("alice"));
        assert_eq!(t.actor(&format!("sha256:{hex}")), None);
        assert_eq!(t.actor(hex), None);
        assert_eq!(t.actor("other"), Some("bob"));
    }

    #[test]
    fn bad_token_files_are_refused_with_the_reason() {
        for (text, why) in [
            ("{}", "no tokens"),
            ("[1]", "not a JSON object"),
            (r#"{"a": 1}"#, "is not a string"),
            (r#"{"a": "x", "b": "x"}"#, "the same token"),
            (r#"{"a": ""}"#, "empty"),
            (r#"{"a": "sha256:abc"}"#, "not 64 hex digits"),
            (
                r#"{"a": "sha256:zz1fed5c9d9cec8e7c6e2ad3e2c0e4ba8cf8b1ad7a85c2bdd52e88d13fd5fb3e"}"#,
                "not 64 hex digits",
            ),
        ] {
            match Tokens::parse(text, "f.json") {
                Err(OmniError::BadRequest(m)) => {
                    assert!(m.contains(why) && m.contains("f.json"), "{text}: {m}")
                }
                Err(e) => panic!("{text}: {e}"),
                Ok(_) => panic!("{text} was accepted"),
            }
        }
    }
}
