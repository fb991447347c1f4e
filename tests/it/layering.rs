//! The kernel (API client, cache, queues, events, manager, and the rest of the runtime) knows
//! the `controller` interface and no controller: a controller is added without touching it,
//! and the kernel can be read and tested alone. Controllers depend on the kernel, never the
//! other way round.

use std::path::{Path, PathBuf};

/// Modules of the kernel, relative to `src/` (files, or folders taken whole).
const KERNEL: &[&str] = &[
    "api",
    "auth",
    "cache",
    "certs",
    "controller.rs",
    "credentials.rs",
    "error.rs",
    "events.rs",
    "gofmt.rs",
    "heap.rs",
    "leader",
    "logging.rs",
    "manager",
    "memops.rs",
    "metrics",
    "notify.rs",
    "obj.rs",
    "pool.rs",
    "queue",
    "reactor.rs",
    "sandbox.rs",
    "server.rs",
    "server",
    "timefmt.rs",
    "timer.rs",
    "workers.rs",
];

fn rust_files(p: &Path, out: &mut Vec<PathBuf>) {
    if p.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(p)
            .expect("read dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for e in entries {
            rust_files(&e, out);
        }
    } else if p.is_file() && p.extension().is_some_and(|e| e == "rs") {
        out.push(p.to_path_buf());
    }
}

#[test]
fn the_kernel_imports_no_controller() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for m in KERNEL {
        rust_files(&src.join(m), &mut files);
    }
    assert!(files.len() > 20, "kernel files found: {}", files.len());
    let mut offenders = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read source");
        for (n, line) in text.lines().enumerate() {
            if line.contains("controllers::") || line.contains("mod controllers") {
                offenders.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "the kernel must not use controllers (move what it needs into the kernel):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn every_source_module_is_classified() {
    // A new top-level module must be placed: kernel, controllers, or the wiring that knows
    // both (command line, configuration, start-up).
    // `fuzz` is test support that drives parsers from every layer.
    let wiring = [
        "cli.rs",
        "cli",
        "config.rs",
        "config",
        "controllers",
        "fuzz",
        "lib.rs",
        "main.rs",
        "run.rs",
        "startup.rs",
    ];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for e in std::fs::read_dir(&src).expect("src") {
        let name = e.expect("entry").file_name().to_string_lossy().to_string();
        assert!(
            KERNEL.contains(&name.as_str()) || wiring.contains(&name.as_str()),
            "src/{name} is neither kernel nor wiring: add it to tests/it/layering.rs"
        );
    }
}
