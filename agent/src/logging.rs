//! Logging setup: stderr for one-shot commands, a file for the TUI (never the screen).
use tracing_subscriber::EnvFilter;

/// Warnings and errors to stderr (`RUST_LOG` overrides).
pub fn init_stderr() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).try_init();
    let _ = tracing_log_bridge();
}

/// aya-log records arrive through the `log` crate; route them into tracing.
fn tracing_log_bridge() -> Result<(), log::SetLoggerError> {
    log::set_logger(&LOG_TO_TRACING).map(|()| log::set_max_level(log::LevelFilter::Info))
}

struct LogToTracing;
static LOG_TO_TRACING: LogToTracing = LogToTracing;

impl log::Log for LogToTracing {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        match r.level() {
            log::Level::Error => tracing::error!(target: "kernel", "{}", r.args()),
            log::Level::Warn => tracing::warn!(target: "kernel", "{}", r.args()),
            log::Level::Info => tracing::info!(target: "kernel", "{}", r.args()),
            _ => tracing::debug!(target: "kernel", "{}", r.args()),
        }
    }
    fn flush(&self) {}
}
