//! `tierscope run`: the headless agent with OTLP and Prometheus export. (Being built: issue 6.)
use anyhow::Result;

#[derive(clap::Args, Clone, Debug, Default)]
pub struct RunArgs {
    /// TOML config file; command-line flags win over it.
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// OTLP endpoint, e.g. http://127.0.0.1:4317 (gRPC) or http://127.0.0.1:4318 (HTTP).
    #[arg(long)]
    pub otlp_endpoint: Option<String>,
    /// grpc or http.
    #[arg(long)]
    pub otlp_protocol: Option<String>,
    /// Serve Prometheus text on this address (loopback by default), e.g. 127.0.0.1:9464.
    #[arg(long)]
    pub prometheus: Option<String>,
}

pub fn run(_args: RunArgs) -> Result<i32> {
    anyhow::bail!("the headless agent is not built yet: use `tierscope snapshot --json`")
}
