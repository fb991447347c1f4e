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

/// The static musl builds allocate with dlmalloc: musl's own malloc serialises every call on
/// one lock with heavy per-call bookkeeping, which cost edgekcm about a fifth of its CPU under
/// load (`just bench`: 2.4 -> 1.6-2.2 CPU-s converge, peak RSS unchanged at ~22 MB).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: heap::Heap = heap::Heap;

/// dlmalloc behind std's futex mutex. dlmalloc's own global wrapper takes a pthread mutex
/// around every call; musl's pthread mutex is a general one (type, robustness and owner
/// checks on each lock and unlock) and was about 5 % of the converge profile. std's mutex is
/// one atomic each way when uncontended, spins briefly before sleeping, and never allocates.
#[cfg(target_env = "musl")]
mod heap {
    use std::alloc::{GlobalAlloc, Layout};
    use std::sync::{Mutex, MutexGuard};

    struct Arena(dlmalloc::Dlmalloc);

    // SAFETY: dlmalloc's state holds raw pointers into memory it mapped itself; it is only
    // ever used with the mutex held, from whichever thread holds it.
    unsafe impl Send for Arena {}

    static ARENA: Mutex<Arena> = Mutex::new(Arena(dlmalloc::Dlmalloc::new()));

    fn arena() -> MutexGuard<'static, Arena> {
        // Nothing in dlmalloc panics while the lock is held; if something ever did, its
        // state is as consistent as dlmalloc leaves it, so poisoning is not a reason to stop.
        ARENA.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub struct Heap;

    // SAFETY: every call forwards to dlmalloc with the arguments GlobalAlloc guarantees
    // (a non-zero size and a valid alignment; pointers it returned, with their layout),
    // under the one lock that serialises all use of the arena.
    unsafe impl GlobalAlloc for Heap {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            unsafe { arena().0.malloc(layout.size(), layout.align()) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { arena().0.free(ptr, layout.size(), layout.align()) }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            unsafe { arena().0.calloc(layout.size(), layout.align()) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            unsafe {
                arena()
                    .0
                    .realloc(ptr, layout.size(), layout.align(), new_size)
            }
        }
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
    edgekcm::logging::init(cfg.verbosity, cfg.logging_format);
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
