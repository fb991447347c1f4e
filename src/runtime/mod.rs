//! The runtime the kernel and the controllers run on: helper threads (`pool`), the executor
//! thread for watch streams (`reactor`), one thread for every delay (`timer`), the worker
//! loop that serves a work queue (`workers`), the static build's allocator and string
//! functions (`heap`, `memops`), the binary's cold pages handed back when idle (`pageout`), systemd's notify socket (`notify`) and the log's formats
//! (`logging`).

pub mod heap;
pub mod logging;
pub mod memops;
pub mod notify;
pub mod pageout;
pub mod pool;
pub mod reactor;
pub mod timer;
pub mod workers;
