//! Rules that keep the static binary within its size budget (`just dist` checks the size itself).

use crate::layering::rust_files;
use std::path::Path;

/// The product's code (not its tests) sorts through `edgekcm::sort`, which shares one compiled
/// instance of the standard sort: each direct `.sort_by(...)` adds 4-5 KB to the binary.
#[test]
fn product_code_sorts_through_the_shared_instance() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let calls = [
        ".sort(",
        ".sort_by(",
        ".sort_by_key(",
        ".sort_by_cached_key(",
        ".sort_unstable(",
        ".sort_unstable_by(",
        ".sort_unstable_by_key(",
    ];
    let mut found = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let name = rel.rsplit('/').next().unwrap_or("");
        let test_only = name.starts_with("tests") || name.ends_with("tests.rs");
        if rel == "sort.rs" || test_only || rel.contains("/tests/") {
            continue;
        }
        let text = std::fs::read_to_string(&f).expect("read source");
        let product = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in product.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if calls.iter().any(|c| code.contains(c)) {
                found.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "sort through edgekcm::sort (crate::sort::sort_by etc.) instead:\n{}",
        found.join("\n")
    );
}
