use edgekcm::cli::{self, Command};
use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A message to stderr before the logger exists. A closed stderr (`edgekcm ... 2>&1 | head`)
/// is not worth a panic: the exit status still says what happened.
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// A bad command line: the error, where to read about the flags, exit 1.
fn usage_error(e: &edgekcm::Error, help: &str) -> ! {
    say(&format!("Error: {e}\nRun '{help}' for the flags."));
    std::process::exit(1);
}

/// A failure once the logger runs: one error line in the log's format, exit 1.
fn fatal(e: &edgekcm::Error) -> ! {
    log::error!(err:% = e; "command failed");
    log::logger().flush();
    std::process::exit(1);
}

/// glibc gives each thread that allocates under contention its own arena, up to eight per
/// core, and each keeps its high-water mark. edgekcm's threads mostly wait on the network, so
/// two arenas cost nothing in speed and keep the resident set near the live heap. An explicit
/// `MALLOC_ARENA_MAX` in the environment wins. (musl has no arenas.)
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    extern "C" {
        fn mallopt(param: std::os::raw::c_int, value: std::os::raw::c_int) -> std::os::raw::c_int;
    }
    const M_ARENA_MAX: std::os::raw::c_int = -8;
    // SAFETY: mallopt only sets an allocator tunable; it is called before any thread starts.
    unsafe {
        mallopt(M_ARENA_MAX, 2);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}

/// The static musl builds allocate with dlmalloc behind small per-thread-group caches
/// (`edgekcm::runtime::heap`): musl's own malloc serialises every call on one lock with heavy per-call
/// bookkeeping, which cost edgekcm about a fifth of its CPU under load.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: edgekcm::runtime::heap::Global = edgekcm::runtime::heap::Global;

/// musl's x86_64 string functions, replaced for the static build (`edgekcm::runtime::memops`: they
/// were a sixth of its CPU under load). Defined here, the linker takes these and never pulls
/// musl's from its archive.
#[cfg(all(target_env = "musl", target_arch = "x86_64"))]
mod libc_mem {
    use edgekcm::runtime::memops;

    /// # Safety
    /// As C's `memcpy`.
    #[no_mangle]
    pub unsafe extern "C" fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
        unsafe { memops::copy(d, s, n) }
    }

    /// # Safety
    /// As C's `memmove`.
    #[no_mangle]
    pub unsafe extern "C" fn memmove(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
        unsafe { memops::move_bytes(d, s, n) }
    }

    /// # Safety
    /// As C's `memcmp`.
    #[no_mangle]
    pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        unsafe { memops::compare(a, b, n) }
    }

    /// # Safety
    /// As C's `bcmp`.
    #[no_mangle]
    pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        unsafe { memops::compare(a, b, n) }
    }
}

fn main() {
    limit_malloc_arenas();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let help = if args.first().is_some_and(|a| a == "certs") {
        "edgekcm certs --help"
    } else {
        "edgekcm --help"
    };
    let cfg = match cli::parse(&args) {
        Ok(Command::Run(cfg)) => cfg,
        Ok(Command::Help(text)) | Ok(Command::Version(text)) => {
            // A closed pipe (`edgekcm --help | head`) is not an error worth a panic.
            let _ = writeln!(std::io::stdout(), "{text}");
            return;
        }
        Ok(Command::Certs(opts)) => match edgekcm::certs::generate(&opts) {
            Ok(report) => {
                let _ = write!(std::io::stdout(), "{report}");
                return;
            }
            Err(e) => usage_error(&e, help),
        },
        Err(e) => usage_error(&e, help),
    };
    edgekcm::runtime::logging::init(cfg.verbosity, cfg.logging_format);
    for w in &cfg.warnings {
        log::warn!("{w}");
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            fatal(&edgekcm::Error::Io(format!(
                "cannot install a signal handler: {e}"
            )));
        }
    }
    match edgekcm::run::run(*cfg, stop) {
        Ok(code) => std::process::exit(code),
        Err(e) => fatal(&e),
    }
}
