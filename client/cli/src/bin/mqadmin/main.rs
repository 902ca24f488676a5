//! `mqadmin`: administer a rocketraft cluster through its nameservers.
//!
//! Every command takes `--namesrv ADDR[,ADDR]`, `--json`, `--admin-token` (or
//! `RR_ADMIN_TOKEN`) and, for brokers that serve TLS, `--tls-ca FILE` (or `RR_TLS_CA`). A
//! failure exits non-zero with
//! a one-line reason on stderr. One module per command group; the commands stay flat
//! (`mqadmin topic-create`, as RocketMQ's mqadmin).

mod cluster;
mod consume_orderly;
mod consumer;
mod drill;
mod message;
mod topic;

use std::process::ExitCode;

use clap::Parser;
use clap::Subcommand;
use rocketraft_cli::access::AccessArgs;
use rocketraft_cli::access::ClusterAccess;
use rocketraft_client::admin::Admin;
use rocketraft_client::connector::ClientTls;

#[derive(Parser)]
#[command(name = "mqadmin", about = "rocketraft admin tool", version)]
struct Cli {
    /// Nameserver addresses, comma separated.
    #[arg(
        long,
        global = true,
        default_value = "127.0.0.1:9876",
        value_delimiter = ','
    )]
    namesrv: Vec<String>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(flatten)]
    access: AccessArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Cluster(cluster::ClusterCommand),
    #[command(flatten)]
    Topic(topic::TopicCommand),
    #[command(flatten)]
    Message(message::MessageCommand),
    #[command(flatten)]
    Consumer(consumer::ConsumerCommand),
    /// Start a local cluster of real processes, run a producer and a push consumer through
    /// scheduled faults, and report what was acknowledged, consumed, lost and duplicated.
    /// Exits non-zero if anything acknowledged was lost.
    Drill(drill::DrillArgs),
}

/// What every command gets: the cluster's nameservers and the output format.
pub struct Context {
    pub namesrv: Vec<String>,
    pub admin: Admin,
    pub json: bool,
    /// How the brokers' TLS is verified, if they serve it.
    pub tls: Option<ClientTls>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let access = match ClusterAccess::load(&cli.access) {
        Ok(access) => access,
        Err(error) => {
            eprintln!("mqadmin: --tls-ca: {error}");
            return ExitCode::FAILURE;
        }
    };
    let context = Context {
        admin: access.admin(cli.namesrv.clone()),
        namesrv: cli.namesrv,
        json: cli.json,
        tls: access.tls().cloned(),
    };
    let outcome = match cli.command {
        Command::Cluster(command) => cluster::run(command, &context).await,
        Command::Topic(command) => topic::run(command, &context).await,
        Command::Message(command) => message::run(command, &context).await,
        Command::Consumer(command) => consumer::run(command, &context).await,
        Command::Drill(args) => drill::run(args, &cli.access, context.json).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mqadmin: {error:#}");
            ExitCode::FAILURE
        }
    }
}
