//! Content negotiation shared by everything the server sends precompressed: the
//! console's assets and the OpenAPI document.

/// Whether an `Accept-Encoding` header accepts gzip: `gzip` or `*` listed without
/// `q=0`. An explicit `gzip;q=0` wins over `*`.
pub fn accepts_gzip(accept_encoding: &str) -> bool {
    let mut wildcard = false;
    for item in accept_encoding.split(',') {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or_default().to_ascii_lowercase();
        let refused = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        match coding.as_str() {
            "gzip" | "x-gzip" => return !refused,
            "*" => wildcard = !refused,
            _ => {}
        }
    }
    wildcard
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_accepted_when_listed_without_a_zero_weight() {
        assert!(accepts_gzip("gzip, deflate, br, zstd"));
        assert!(accepts_gzip("br;q=1.0, GZIP;q=0.5"));
        assert!(accepts_gzip("*"));
        assert!(!accepts_gzip(""));
        assert!(!accepts_gzip("br, deflate"));
        assert!(!accepts_gzip("gzip;q=0"));
        assert!(!accepts_gzip("*, gzip;q=0"));
        assert!(!accepts_gzip("*;q=0"));
    }
}
