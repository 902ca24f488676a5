//! `mqadmin` commands about broker groups and their nodes: list them, move a group's
//! leadership, let a node come back on an empty disk.

use clap::Subcommand;
use serde_json::json;

use crate::Context;

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Broker groups, their nodes and leaders.
    ClusterList,
    /// Move a broker group's leadership to another of its nodes (planned maintenance).
    TransferLeader {
        #[arg(long)]
        group: String,
        #[arg(long)]
        to: u64,
    },
    /// Let a stopped node come back with an empty data dir (a replaced disk): run it after
    /// stopping the node, then start the node on its new disk; the leader rebuilds it.
    ReplaceNode {
        #[arg(long)]
        group: String,
        #[arg(long)]
        node: u64,
    },
}

pub async fn run(command: ClusterCommand, context: &Context) -> anyhow::Result<()> {
    match command {
        ClusterCommand::ClusterList => cluster_list(context).await,
        ClusterCommand::TransferLeader { group, to } => {
            let term = context.admin.transfer_leader(&group, to).await?;
            if context.json {
                println!("{}", json!({"group": group, "leader_id": to, "term": term}));
            } else {
                println!("{group}: node {to} leads in term {term}");
            }
            Ok(())
        }
        ClusterCommand::ReplaceNode { group, node } => {
            context.admin.prepare_node_replacement(&group, node).await?;
            if context.json {
                println!(
                    "{}",
                    json!({"group": group, "node": node, "prepared": true})
                );
            } else {
                println!("{group}: node {node} may now start with an empty data dir");
            }
            Ok(())
        }
    }
}

async fn cluster_list(context: &Context) -> anyhow::Result<()> {
    let info = context.admin.cluster_info().await?;
    if context.json {
        let groups: Vec<_> = info
            .groups
            .iter()
            .map(|g| json!({"cluster": g.cluster, "group": g.group, "leader_id": g.leader_id, "leader_addr": g.leader_addr, "term": g.term, "nodes": g.nodes}))
            .collect();
        println!("{}", json!({ "groups": groups }));
        return Ok(());
    }
    for group in &info.groups {
        let leader = group.leader_id.map_or_else(
            || "none".to_owned(),
            |id| format!("{id} ({})", group.leader_addr),
        );
        println!(
            "{} {} term {} leader {leader}",
            group.cluster, group.group, group.term
        );
        for (id, addr) in &group.nodes {
            println!("  node {id} {addr}");
        }
    }
    Ok(())
}
