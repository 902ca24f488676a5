//! `nameserver`: runs the route registry until Ctrl-C.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use rocketraft_nameserver::server::BROKER_EXPIRY_DEFAULT;
use rocketraft_nameserver::server::LISTEN_DEFAULT;
use rocketraft_nameserver::server::NameServer;
use rocketraft_nameserver::server::NameServerConfig;

#[derive(Parser)]
#[command(name = "nameserver", about = "rocketraft route registry", version)]
struct Cli {
    #[arg(long, default_value = LISTEN_DEFAULT)]
    listen: SocketAddr,
    /// Drop a broker node not heard from for this many milliseconds.
    #[arg(long, default_value_t = BROKER_EXPIRY_DEFAULT.as_millis() as u64)]
    broker_expiry_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        // Colour codes only for a terminal: a log written to a file stays plain text.
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let cli = Cli::parse();
    anyhow::ensure!(
        cli.broker_expiry_ms > 0,
        "--broker-expiry-ms must be positive"
    );
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("bind {}", cli.listen))?;
    let config = NameServerConfig {
        broker_expiry: Duration::from_millis(cli.broker_expiry_ms),
    };
    let server = NameServer::start_on(listener, config)?;
    println!("nameserver serving on {}", server.addr());
    tokio::signal::ctrl_c().await.context("wait for ctrl-c")?;
    server.shutdown().await;
    Ok(())
}
