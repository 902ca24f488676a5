//! `mqadmin` commands about broker groups and their nodes: list them, move a group's
//! leadership, let a node come back on an empty disk, add, remove and replace nodes.

use clap::Subcommand;
use rocketraft_client::admin::MembershipChanged;
use rocketraft_client::admin::NewNode;
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
    /// Add a node to a broker group: start it first (`bootstrap = false`, its own id and
    /// address in `peers`); it joins as a learner, catches up, then becomes a voter.
    NodeAdd {
        #[arg(long)]
        group: String,
        #[arg(long)]
        node: u64,
        /// The new node's broker API address.
        #[arg(long)]
        addr: String,
        /// The new node's Raft address, if it has a `raft_listen` (else Raft is at --addr).
        #[arg(long)]
        raft_addr: Option<String>,
    },
    /// Remove a node from a broker group (the leader hands its leadership on first); the
    /// removed node stops registering and can then be shut down.
    NodeRemove {
        #[arg(long)]
        group: String,
        #[arg(long)]
        node: u64,
    },
    /// Give a dead node's place to a new node at a new address, in one joint change: the new
    /// node catches up as a learner first, so the group never has fewer live voters.
    NodeReplace {
        #[arg(long)]
        group: String,
        /// The node that leaves.
        #[arg(long)]
        old: u64,
        /// The node that takes its place (running, `bootstrap = false`).
        #[arg(long)]
        node: u64,
        /// The new node's broker API address.
        #[arg(long)]
        addr: String,
        /// The new node's Raft address, if it has a `raft_listen` (else Raft is at --addr).
        #[arg(long)]
        raft_addr: Option<String>,
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
        ClusterCommand::NodeAdd {
            group,
            node,
            addr,
            raft_addr,
        } => {
            let new_node = NewNode {
                id: node,
                addr,
                raft_addr,
            };
            let changed = context
                .admin
                .change_membership(&group, Some(new_node), &[])
                .await?;
            print_membership(context, &group, &changed);
            Ok(())
        }
        ClusterCommand::NodeRemove { group, node } => {
            let changed = context
                .admin
                .change_membership(&group, None, &[node])
                .await?;
            print_membership(context, &group, &changed);
            Ok(())
        }
        ClusterCommand::NodeReplace {
            group,
            old,
            node,
            addr,
            raft_addr,
        } => {
            let new_node = NewNode {
                id: node,
                addr,
                raft_addr,
            };
            let changed = context
                .admin
                .change_membership(&group, Some(new_node), &[old])
                .await?;
            print_membership(context, &group, &changed);
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

fn print_membership(context: &Context, group: &str, changed: &MembershipChanged) {
    if context.json {
        println!("{}", json!({"group": group, "membership": changed}));
        return;
    }
    let voters: Vec<String> = changed
        .voters
        .iter()
        .map(|(id, addr)| format!("{id}={addr}"))
        .collect();
    println!(
        "{group}: voters {} (caught up in {} ms, changed in {} ms, by leader {})",
        voters.join(" "),
        changed.catch_up_ms,
        changed.change_ms,
        changed.leader_id
    );
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
