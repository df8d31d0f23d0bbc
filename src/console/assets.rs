//! The console's files, embedded by `build.rs`, and the choice between a file's plain
//! and gzipped copy.

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    /// Path below `console/`, e.g. `views/runs.js`.
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
    /// The same bytes, gzipped at build time.
    pub gzip: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/console_manifest.rs"));

/// The asset at `path` of the bundle named `hash`; `None` for another bundle (a page
/// loaded before an upgrade asks for assets this binary does not have) or no such file.
pub fn find(hash: &str, path: &str) -> Option<&'static Asset> {
    if hash != BUNDLE_HASH {
        return None;
    }
    ASSETS.iter().find(|a| a.path == path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_holds_the_entry_points_and_compresses_them() {
        for path in ["app.js", "api.js", "console.css"] {
            let asset = find(BUNDLE_HASH, path).unwrap_or_else(|| panic!("{path} is embedded"));
            assert!(!asset.body.is_empty());
            assert!(
                asset.gzip.len() < asset.body.len(),
                "{path} gzipped is smaller"
            );
        }
        assert!(find("0000", "app.js").is_none(), "another bundle's hash");
        assert!(find(BUNDLE_HASH, "../Cargo.toml").is_none());
    }

    #[test]
    fn index_names_the_assets_of_this_bundle() {
        let html = std::str::from_utf8(INDEX.body).unwrap();
        assert!(html.contains(&format!("/assets/{BUNDLE_HASH}/app.js")));
        assert!(!html.contains("__ASSET_BASE__"));
        assert!(
            !html.contains("<script>"),
            "no inline script: the CSP forbids it"
        );
    }
}
