//! The process's signals, listened to once for a whole command: SIGINT (Ctrl-C) and SIGTERM stop
//! it, SIGHUP asks for a reload (or, where there is nothing to reload, stops it too).
//!
//! The listeners are installed once, before the work starts, and kept: a signal that arrives while
//! a turn of the loop is busy (long numa_maps reads) is remembered by the stream and seen at the
//! next `recv`, never lost the way a `ctrl_c()` future built anew on every turn loses it.
use anyhow::{Context as _, Result};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// What a signal asks of the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// SIGINT or SIGTERM: flush what is pending and exit.
    Stop(&'static str),
    /// SIGHUP: read the configuration again.
    Reload,
}

/// SIGINT, SIGTERM and SIGHUP listeners of one command. Must be created inside the runtime.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    /// Installs the three listeners (from now on these signals no longer kill the process).
    pub fn install() -> Result<Signals> {
        let one = |kind, name| signal(kind).with_context(|| format!("installing the {name} handler"));
        Ok(Signals {
            interrupt: one(SignalKind::interrupt(), "SIGINT")?,
            terminate: one(SignalKind::terminate(), "SIGTERM")?,
            hangup: one(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// Waits for the next signal. Cancel-safe: use it in `select!` on every turn.
    pub async fn recv(&mut self) -> Request {
        tokio::select! {
            biased;
            _ = self.interrupt.recv() => Request::Stop("SIGINT"),
            _ = self.terminate.recv() => Request::Stop("SIGTERM"),
            _ = self.hangup.recv() => Request::Reload,
        }
    }

    /// Waits for a signal and treats every one as a stop (commands with nothing to reload; a hang
    /// up means the terminal went away). Returns the signal's name.
    pub async fn stop(&mut self) -> &'static str {
        match self.recv().await {
            Request::Stop(name) => name,
            Request::Reload => "SIGHUP",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signal raised before anyone waits (while the loop is busy) is still delivered.
    #[test]
    fn a_signal_raised_while_busy_is_not_lost() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let mut s = Signals::install().expect("signal handlers");
            // SAFETY: raise sends a signal to this process, whose handler tokio installed above.
            unsafe { libc::raise(libc::SIGHUP) };
            std::thread::sleep(std::time::Duration::from_millis(50)); // the "busy" turn
            let got = tokio::time::timeout(std::time::Duration::from_secs(5), s.recv()).await;
            assert_eq!(got.ok(), Some(Request::Reload));
            unsafe { libc::raise(libc::SIGHUP) };
            let got = tokio::time::timeout(std::time::Duration::from_secs(5), s.stop()).await;
            assert_eq!(got.ok(), Some("SIGHUP"));
        });
    }
}
