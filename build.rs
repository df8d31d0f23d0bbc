//! Embeds the console (`console/`: plain ES modules, CSS, `index.html`) into the
//! binary. There is no npm step: the files are served as written, so this script only
//!
//! - names the bundle by a hash of its contents, so assets live under
//!   `/assets/<hash>/…` and can be cached forever (`immutable`) while `index.html`,
//!   the one file that names the hash, is revalidated on every load;
//! - writes `index.html` with that asset base filled in;
//! - gzips every file once, here, so the server never compresses per request;
//! - emits a manifest (`console_manifest.rs` in `OUT_DIR`) that `src/console/assets.rs`
//!   includes: one `include_bytes!` per file and per gzipped copy.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Placeholder in `console/index.html` replaced by `/assets/<hash>`.
const ASSET_BASE_PLACEHOLDER: &str = "__ASSET_BASE__";

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let source = root.join("console");
    // A directory makes cargo rescan every file below it.
    println!("cargo:rerun-if-changed=console");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));

    let mut files = Vec::new();
    collect(&source, &source, &mut files);
    files.sort();

    let mut bundle = Sha256::new();
    for (relative, contents) in &files {
        bundle.update(relative.as_bytes());
        bundle.update([0]);
        bundle.update((contents.len() as u64).to_le_bytes());
        bundle.update(contents);
    }
    let hash = hex(&bundle.finalize()[..6]);

    let embedded = out.join("console");
    std::fs::create_dir_all(&embedded).expect("creating OUT_DIR/console");
    let mut manifest = String::new();
    manifest.push_str(&format!("pub const BUNDLE_HASH: &str = {hash:?};\n"));
    manifest.push_str("pub static ASSETS: &[Asset] = &[\n");
    let mut index = None;
    for (number, (relative, contents)) in files.iter().enumerate() {
        let contents = if relative == "index.html" {
            let html = String::from_utf8(contents.clone()).expect("index.html is UTF-8");
            assert!(
                html.contains(ASSET_BASE_PLACEHOLDER),
                "console/index.html must name its assets under {ASSET_BASE_PLACEHOLDER}"
            );
            html.replace(ASSET_BASE_PLACEHOLDER, &format!("/assets/{hash}"))
                .into_bytes()
        } else {
            contents.clone()
        };
        let plain = embedded.join(format!("{number}"));
        let gzipped = embedded.join(format!("{number}.gz"));
        std::fs::write(&plain, &contents).expect("writing an embedded asset");
        std::fs::write(&gzipped, gzip(&contents)).expect("writing a gzipped asset");
        let entry = format!(
            "    Asset {{ path: {relative:?}, content_type: {:?}, body: include_bytes!({:?}), gzip: include_bytes!({:?}) }},\n",
            content_type(relative),
            plain.display().to_string(),
            gzipped.display().to_string(),
        );
        if relative == "index.html" {
            index = Some(entry.trim().trim_end_matches(',').to_string());
        } else {
            manifest.push_str(&entry);
        }
    }
    manifest.push_str("];\n");
    let index = index.expect("console/index.html is missing");
    manifest.push_str(&format!("pub static INDEX: Asset = {index};\n"));
    std::fs::write(out.join("console_manifest.rs"), manifest).expect("writing the manifest");
}

/// Every file below `dir`, as (path relative to `root` with `/` separators, contents).
fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {dir:?}: {e}"));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(root, &path, out);
            continue;
        }
        let relative = path
            .strip_prefix(root)
            .expect("below the root")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let contents = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path:?}: {e}"));
        out.push((relative, contents));
    }
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("json") => "application/json",
        _ => panic!("console/{path}: add its content type to build.rs"),
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
