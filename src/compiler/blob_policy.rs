//! The external-blob policy: which URI bases a Blob cell may reference.
//! Deny by default. URIs are parsed into scheme, host and path segments and
//! compared segment by segment, never as string prefixes; `.`/`..`
//! segments, empty segments, queries, fragments, backslashes and
//! percent-encoded separators or dots are refused outright.

use serde::{Deserialize, Serialize};

/// A URI reduced to what the policy compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalUri {
    /// Lowercase.
    pub scheme: String,
    /// Lowercase; empty for `file:///...`.
    pub host: String,
    /// Percent-decoded, none empty, none `.` or `..`.
    pub segments: Vec<String>,
}

/// The URI's one spelling, as it is checked and stored: lowercase scheme
/// and host, each decoded segment percent-encoded where RFC 3986 requires
/// it (a byte outside the unreserved characters, sub-delims, `:` and `@`),
/// so a reader of the stored reference resolves exactly the object the
/// policy allowed.
impl std::fmt::Display for ExternalUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}/", self.scheme, self.host)?;
        for (i, seg) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            for b in seg.bytes() {
                if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b) {
                    write!(f, "{}", b as char)?;
                } else {
                    write!(f, "%{b:02X}")?;
                }
            }
        }
        Ok(())
    }
}

/// Decode one path segment's `%XX` escapes, refusing any that spell a
/// separator, a dot, a percent sign or a control byte.
fn decode_segment(seg: &str) -> Result<String, String> {
    let bytes = seg.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = seg
                .get(i + 1..i + 3)
                .filter(|h| h.chars().all(|c| c.is_ascii_hexdigit()))
                .ok_or_else(|| format!("a malformed percent escape in {seg:?}"))?;
            let v = u8::from_str_radix(hex, 16).expect("two hex digits");
            if matches!(v, b'.' | b'/' | b'\\' | b'%') || v < 0x20 || v == 0x7f {
                return Err(format!("a percent-encoded {:?} in {seg:?}", v as char));
            }
            out.push(v);
            i += 3;
        } else {
            if b == b'\\' || b < 0x20 || b == 0x7f {
                return Err(format!("a backslash or control character in {seg:?}"));
            }
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{seg:?} is not UTF-8 once decoded"))
}

/// Parse an absolute `scheme://host/path` URI for the policy.
pub fn parse(uri: &str) -> Result<ExternalUri, String> {
    let (scheme, rest) = uri
        .split_once("://")
        .ok_or_else(|| format!("{uri:?} is not an absolute URI (scheme://...)"))?;
    let scheme_ok = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok {
        return Err(format!("{uri:?} has a malformed scheme"));
    }
    if rest.contains(['?', '#']) {
        return Err(format!("{uri:?} has a query or fragment"));
    }
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.contains(['@', '%', '\\']) || host.chars().any(|c| c.is_control()) {
        return Err(format!("{uri:?} has a malformed host"));
    }
    let scheme = scheme.to_ascii_lowercase();
    let mut host = host.to_ascii_lowercase();
    if scheme == "file" && host == "localhost" {
        host.clear();
    }
    if host.is_empty() && scheme != "file" {
        return Err(format!("{uri:?} names no host"));
    }
    let mut segments = Vec::new();
    if !path.is_empty() {
        for raw in path.split('/') {
            let seg = decode_segment(raw)?;
            if seg.is_empty() {
                return Err(format!("{uri:?} has an empty path segment"));
            }
            if seg == "." || seg == ".." {
                return Err(format!("{uri:?} has a {seg:?} segment"));
            }
            segments.push(seg);
        }
    }
    Ok(ExternalUri {
        scheme,
        host,
        segments,
    })
}

/// The bases external Blob references may point under. Empty: none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobPolicy {
    /// Normalised base URIs, sorted.
    pub allow: Vec<String>,
}

impl BlobPolicy {
    /// The policy with `base` allowed too (normalised; a base must name a
    /// host, or a path for `file://`).
    pub fn with_allowed(mut self, base: &str) -> Result<Self, String> {
        let b = parse(base)?;
        if b.scheme == "file" && b.segments.is_empty() {
            return Err("allowing all of file:/// is refused: name a folder".into());
        }
        let norm = b.to_string();
        if !self.allow.contains(&norm) {
            self.allow.push(norm);
            self.allow.sort();
        }
        Ok(self)
    }

    /// The policy without `base` (normalised the same way).
    pub fn without(mut self, base: &str) -> Result<Self, String> {
        let norm = parse(base)?.to_string();
        self.allow.retain(|a| *a != norm);
        Ok(self)
    }

    /// Whether `uri` is under an allowed base, or why not.
    pub fn check(&self, uri: &str) -> Result<ExternalUri, String> {
        let u = parse(uri)?;
        let allowed = self.allow.iter().any(|base| {
            parse(base).is_ok_and(|b| {
                b.scheme == u.scheme
                    && b.host == u.host
                    && u.segments.len() >= b.segments.len()
                    && b.segments.iter().zip(&u.segments).all(|(x, y)| x == y)
            })
        });
        if allowed {
            Ok(u)
        } else if u.scheme == "file" && self.allow.is_empty() {
            Err(format!(
                "{uri:?}: file:// references are never allowed by default"
            ))
        } else {
            Err(format!(
                "{uri:?} is outside the graph's external-blob policy (allowed: {})",
                if self.allow.is_empty() {
                    "none".to_string()
                } else {
                    self.allow.join(", ")
                }
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(bases: &[&str]) -> BlobPolicy {
        bases
            .iter()
            .fold(BlobPolicy::default(), |p, b| p.with_allowed(b).unwrap())
    }

    #[test]
    fn nothing_is_allowed_by_default_and_file_never_is() {
        let p = BlobPolicy::default();
        assert!(p.check("s3://bucket/a.bin").is_err());
        let f = p.check("file:///etc/passwd").unwrap_err();
        assert!(f.contains("never allowed by default"), "{f}");
        assert!(BlobPolicy::default().with_allowed("file:///").is_err());
    }

    #[test]
    fn bases_match_whole_segments_not_string_prefixes() {
        let p = policy(&["s3://bucket/pre"]);
        assert!(p.check("s3://bucket/pre/x.bin").is_ok());
        assert!(p.check("s3://bucket/pre").is_ok());
        assert!(p.check("s3://bucket/prefix2/x").is_err());
        assert!(p.check("s3://bucket2/pre/x").is_err());
        assert!(p.check("gs://bucket/pre/x").is_err());
        // Scheme and host compare without case; paths with it.
        assert!(p.check("S3://BUCKET/pre/x").is_ok());
        assert!(p.check("s3://bucket/PRE/x").is_err());
        // A percent escape of an ordinary character compares decoded.
        assert!(p.check("s3://bucket/pr%65/x").is_ok());
        let files = policy(&["file:///data/blobs"]);
        assert!(files.check("file:///data/blobs/a").is_ok());
        assert!(files.check("file://localhost/data/blobs/a").is_ok());
        assert!(files.check("file:///data/blobs2/a").is_err());
    }

    #[test]
    fn traversal_and_encoding_tricks_are_refused() {
        let p = policy(&["s3://bucket/pre", "file:///data"]);
        for bad in [
            "s3://bucket/pre/../secret",
            "s3://bucket/pre/./x",
            "s3://bucket/pre/%2e%2e/secret",
            "s3://bucket/pre/%2E%2E/secret",
            "s3://bucket/pre%2fx",
            "s3://bucket/pre/%5c..",
            "s3://bucket/pre/a%00",
            "s3://bucket/pre/a%zz",
            "s3://bucket/pre//x",
            "s3://bucket/pre/x?y=1",
            "s3://bucket/pre/x#f",
            "s3://user@bucket/pre/x",
            "file:///data/..",
            "file:///data/a\\..\\b",
            "relative/path",
            "s3:///pre/x",
        ] {
            assert!(p.check(bad).is_err(), "{bad} was allowed");
        }
    }
}
