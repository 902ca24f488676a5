//! `nameserver`: runs the route registry until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use rocketraft_nameserver::settings::NameServerSettings;
use rocketraft_server::nameserver::start_nameserver;
use rocketraft_server_kit::logging::init_logging;

#[derive(Parser)]
#[command(name = "nameserver", about = "rocketraft route registry", version)]
struct Cli {
    /// A TOML config file (keys `listen`, `broker_expiry_ms`); flags override its keys.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where to serve [default: 127.0.0.1:9876].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Drop a broker node not heard from for this many milliseconds [default: 120000].
    #[arg(long)]
    broker_expiry_ms: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut settings = match &cli.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read config {}", path.display()))?;
            NameServerSettings::from_toml(&text)
                .with_context(|| format!("config {}", path.display()))?
        }
        None => NameServerSettings::default(),
    };
    settings.listen = cli.listen.or(settings.listen);
    settings.broker_expiry_ms = cli.broker_expiry_ms.or(settings.broker_expiry_ms);
    settings.metrics_listen = cli.metrics_listen.or(settings.metrics_listen);
    let (listen, config) = settings.resolve()?;
    init_logging(settings.log_format, "info");
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("bind {listen}"))?;
    let server = start_nameserver(listener, config)?;
    println!("nameserver serving on {}", server.addr());
    if let Some(metrics) = server.metrics_addr() {
        println!("metrics on http://{metrics}/metrics");
    }
    tokio::signal::ctrl_c().await.context("wait for ctrl-c")?;
    server.shutdown().await;
    Ok(())
}
