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
    /// What every node of a broker group reports: role, term, Raft log and CommitLog extent,
    /// disk use, repairs and scrub findings, membership.
    BrokerStatus {
        #[arg(long)]
        group: String,
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
        #[command(flatten)]
        new: NewNodeArgs,
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
        #[command(flatten)]
        new: NewNodeArgs,
    },
}

/// The node `node-add` and `node-replace` bring in.
#[derive(clap::Args)]
pub struct NewNodeArgs {
    /// Its node id.
    #[arg(long)]
    node: u64,
    /// Its broker API address.
    #[arg(long)]
    addr: String,
    /// Its Raft address, if it has a `raft_listen` (else Raft is at --addr).
    #[arg(long)]
    raft_addr: Option<String>,
}

impl From<NewNodeArgs> for NewNode {
    fn from(args: NewNodeArgs) -> NewNode {
        NewNode {
            id: args.node,
            addr: args.addr,
            raft_addr: args.raft_addr,
        }
    }
}

pub async fn run(command: ClusterCommand, context: &Context) -> anyhow::Result<()> {
    match command {
        ClusterCommand::ClusterList => cluster_list(context).await,
        ClusterCommand::BrokerStatus { group } => broker_status(context, &group).await,
        ClusterCommand::TransferLeader { group, to } => {
            let term = context.admin.transfer_leader(&group, to).await?;
            if context.json {
                println!("{}", json!({"group": group, "leader_id": to, "term": term}));
            } else {
                println!("{group}: node {to} leads in term {term}");
            }
            Ok(())
        }
        ClusterCommand::NodeAdd { group, new } => {
            change_membership(context, &group, Some(new.into()), &[]).await
        }
        ClusterCommand::NodeRemove { group, node } => {
            change_membership(context, &group, None, &[node]).await
        }
        ClusterCommand::NodeReplace { group, old, new } => {
            change_membership(context, &group, Some(new.into()), &[old]).await
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

/// Adds `add` to `group` and removes `remove` from it, then prints what the change left.
async fn change_membership(
    context: &Context,
    group: &str,
    add: Option<NewNode>,
    remove: &[u64],
) -> anyhow::Result<()> {
    let changed = context.admin.change_membership(group, add, remove).await?;
    print_membership(context, group, &changed);
    Ok(())
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

async fn broker_status(context: &Context, group: &str) -> anyhow::Result<()> {
    let reports = context.admin.node_statuses(group).await?;
    if context.json {
        let nodes: Vec<_> = reports
            .iter()
            .map(|report| match &report.status {
                Ok(status) => json!({
                    "node_id": report.node_id,
                    "addr": report.addr,
                    "role": status.role,
                    "term": status.term,
                    "leader_id": status.leader_id,
                    "last_log_index": status.last_log_index,
                    "last_applied_index": status.last_applied_index,
                    "snapshot_index": status.snapshot_index,
                    "commit_log_min_offset": status.commit_log_min_offset,
                    "commit_log_max_offset": status.commit_log_max_offset,
                    "disk_used_ratio": status.disk_used_ratio,
                    "disk_full": status.disk_full,
                    "raft_log_repair_up_to": status.raft_log_repair_up_to,
                    "raft_log_repair": status.raft_log_repair,
                    "raft_log_after_power_loss": status.raft_log_after_power_loss,
                    "scrub_passes": status.scrub_passes,
                    "scrub_unrepaired": status.scrub_unrepaired,
                    "scrub_index_repairs": status.scrub_index_repairs,
                    "scrub_blocks_repaired": status.scrub_blocks_repaired,
                    "scrub_last_finding": status.scrub_last_finding,
                    "voters": status.voters,
                    "learners": status.learners,
                }),
                Err(error) => json!({
                    "node_id": report.node_id,
                    "addr": report.addr,
                    "error": error,
                }),
            })
            .collect();
        println!("{}", json!({ "group": group, "nodes": nodes }));
        return Ok(());
    }
    for report in &reports {
        let status = match &report.status {
            Ok(status) => status,
            Err(error) => {
                println!(
                    "node {} {}: unreachable: {error}",
                    report.node_id, report.addr
                );
                continue;
            }
        };
        let index = |index: Option<u64>| index.map_or_else(|| "-".to_owned(), |i| i.to_string());
        println!(
            "node {} {}: {} term {}, log {} applied {}, commitlog {}..{}, disk {:.0}%{}",
            report.node_id,
            report.addr,
            status.role,
            status.term,
            index(status.last_log_index),
            index(status.last_applied_index),
            status.commit_log_min_offset,
            status.commit_log_max_offset,
            status.disk_used_ratio * 100.0,
            if status.disk_full {
                " FULL (sends refused)"
            } else {
                ""
            },
        );
        if status.raft_log_repair_up_to > 0 || !status.raft_log_repair.is_empty() {
            println!("  raft log repair: {}", status.raft_log_repair);
        }
        if status.scrub_unrepaired > 0 || !status.scrub_last_finding.is_empty() {
            println!(
                "  scrub: {} passes, {} unrepaired; last finding: {}",
                status.scrub_passes, status.scrub_unrepaired, status.scrub_last_finding
            );
        }
    }
    Ok(())
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
