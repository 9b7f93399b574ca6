//! SIGINT and SIGTERM before `run` catches them itself.
//!
//! A shell starts a background job of a script with SIGINT ignored, and an ignored signal stays
//! ignored across exec: a SIGINT sent to such a run before it installed its handler was lost,
//! and the run went on. Decision: SIGINT and SIGTERM stop a run whatever disposition it
//! inherited. From the first thing `main` does, a handler is in place that, until the run's own
//! handling takes over ([`run_catches`]), ends the process by the signal's default action, as
//! a run started in a terminal ends: nothing of an earlier run has been removed and no fault
//! started yet, so there is nothing to restore. From then on the run's handling interrupts the
//! run and restores its faults.

use std::sync::atomic::{AtomicBool, Ordering};

static RUN_CATCHES: AtomicBool = AtomicBool::new(false);

extern "C" fn before_run(sig: libc::c_int) {
    // The run's own handler (tokio's, which calls this one after it) has it.
    if RUN_CATCHES.load(Ordering::SeqCst) {
        return;
    }
    // SAFETY: signal and raise are async-signal-safe; the raised signal is delivered, with
    // its default action, when this handler returns.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Installs the handler for SIGINT and SIGTERM, over an inherited SIG_IGN too.
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only touches an atomic and calls
        // async-signal-safe functions.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = before_run as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The run now catches SIGINT and SIGTERM itself: this handler leaves them to it.
pub fn run_catches() {
    RUN_CATCHES.store(true, Ordering::SeqCst);
}
