//! The docs stay true to the code: the crate graph ARCHITECTURE.md draws is the one
//! `cargo metadata` reports, and every repository path and Rust module path the docs name
//! in backticks exists in the repository.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::Path;
use std::path::PathBuf;

use anyhow::Context;
use serde_json::Value;

/// What marks the checked crate graph in ARCHITECTURE.md: the fenced block after it.
const CRATE_GRAPH_MARKER: &str = "<!-- crate-graph -->";
/// The prefix every workspace package name has, left out in the drawn graph.
const PACKAGE_PREFIX: &str = "rocketraft-";
/// Documents whose paths are not ours to check: dated logs, each entry naming files as they
/// were on its date, and research briefs, which name another project's files.
const HISTORY_DOCUMENTS: [&str; 2] = [
    "docs/performance-log.md",
    "docs/research/rocketmq-4x-remoting.md",
];
/// File name endings that make a backticked word a repository path.
const PATH_ENDINGS: [&str; 8] = [
    ".rs", ".md", ".toml", ".proto", ".sh", ".service", ".py", "/",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lies in the workspace")
        .to_path_buf()
}

/// Crate -> the workspace crates it depends on (normal dependencies), short names.
type CrateGraph = BTreeMap<String, BTreeSet<String>>;

fn short(name: &str) -> String {
    name.strip_prefix(PACKAGE_PREFIX).unwrap_or(name).to_owned()
}

fn graph_from_metadata() -> anyhow::Result<CrateGraph> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace_root())
        .output()
        .context("run cargo metadata")?;
    anyhow::ensure!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout)?;
    let packages = metadata["packages"]
        .as_array()
        .context("cargo metadata lists packages")?;
    let members: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut graph = CrateGraph::new();
    for package in packages {
        let name = package["name"].as_str().context("a package name")?;
        let dependencies = package["dependencies"]
            .as_array()
            .context("a package's dependencies")?
            .iter()
            .filter(|dependency| dependency["kind"].is_null())
            .filter_map(|dependency| dependency["name"].as_str())
            .filter(|dependency| members.contains(dependency))
            .map(short)
            .collect();
        graph.insert(short(name), dependencies);
    }
    Ok(graph)
}

/// The graph in the fenced block after [`CRATE_GRAPH_MARKER`]: `name -> dep, dep` lines.
fn graph_from_architecture(text: &str) -> anyhow::Result<CrateGraph> {
    let after = text
        .split_once(CRATE_GRAPH_MARKER)
        .context("ARCHITECTURE.md has no crate graph marker")?
        .1;
    let block = after
        .trim_start()
        .strip_prefix("```text")
        .and_then(|rest| rest.split_once("```"))
        .context("the crate graph marker is followed by a ```text block")?
        .0;
    let mut graph = CrateGraph::new();
    for line in block.lines().map(str::trim).filter(|line| !line.is_empty()) {
        let (name, dependencies) = line
            .split_once("->")
            .with_context(|| format!("crate graph line {line:?}: expected `name -> deps`"))?;
        let dependencies = dependencies
            .split(',')
            .map(str::trim)
            .filter(|dependency| !dependency.is_empty())
            .map(str::to_owned)
            .collect();
        anyhow::ensure!(
            graph.insert(name.trim().to_owned(), dependencies).is_none(),
            "crate {} drawn twice",
            name.trim()
        );
    }
    Ok(graph)
}

#[test]
fn the_crate_graph_architecture_draws_is_cargos() -> anyhow::Result<()> {
    let text = std::fs::read_to_string(workspace_root().join("ARCHITECTURE.md"))?;
    let drawn = graph_from_architecture(&text)?;
    let actual = graph_from_metadata()?;
    for (name, dependencies) in &actual {
        match drawn.get(name) {
            None => panic!("ARCHITECTURE.md draws no crate {name} (depends on {dependencies:?})"),
            Some(drawn) => assert_eq!(
                drawn, dependencies,
                "crate {name}: ARCHITECTURE.md draws {drawn:?}, Cargo.toml says {dependencies:?}"
            ),
        }
    }
    let extra: Vec<_> = drawn
        .keys()
        .filter(|name| !actual.contains_key(*name))
        .collect();
    assert!(
        extra.is_empty(),
        "ARCHITECTURE.md draws crates that do not exist: {extra:?}"
    );
    Ok(())
}

/// The Markdown files whose paths are checked: the README, ARCHITECTURE.md, `bench/` and
/// everything under `docs/` but its dated logs.
fn documents() -> anyhow::Result<Vec<PathBuf>> {
    let root = workspace_root();
    let mut documents = vec![
        root.join("README.md"),
        root.join("ARCHITECTURE.md"),
        root.join("bench/README.md"),
    ];
    let mut folders = vec![root.join("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(folder)? {
            let path = entry?.path();
            let history = HISTORY_DOCUMENTS
                .iter()
                .any(|history| path.ends_with(history));
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|extension| extension == "md") && !history {
                documents.push(path);
            }
        }
    }
    Ok(documents)
}

/// Every text between backticks outside fenced code blocks, with its line number.
fn backticked(text: &str) -> Vec<(usize, &str)> {
    let mut found = Vec::new();
    let mut fenced = false;
    for (number, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        found.extend(
            line.split('`')
                .skip(1)
                .step_by(2)
                .map(|word| (number + 1, word)),
        );
    }
    found
}

/// A backticked word that names a repository path: no spaces, no URL, and a `/` with a known
/// file ending or a trailing `/`. Globs and placeholders (`*`, `<`, `N`-style names) are not
/// paths.
fn as_repository_path(word: &str) -> Option<&str> {
    let looks_like_path = word.contains('/')
        && !word.contains(char::is_whitespace)
        && !word.contains("://")
        && !word.contains(['*', '<', '>', '{', '$', '='])
        && !word.starts_with('/')
        && !word.starts_with('-')
        && PATH_ENDINGS.iter().any(|ending| word.ends_with(ending));
    looks_like_path.then_some(word)
}

/// Where a repository path is found: from the root, or relative to a crate's directory (the
/// docs say `src/lib.rs` of the crate they discuss), or to `broker/src/`. A path out of the
/// repository (`../`) is not found: a fresh clone has nothing there.
fn path_exists(root: &Path, path: &str) -> bool {
    if path.starts_with("../") {
        return false;
    }
    let path = path.trim_start_matches("./");
    let bases = [
        "",
        "broker/src/",
        "broker/",
        "client/src/",
        "client/",
        "tests/",
        "proto/",
    ];
    bases
        .iter()
        .any(|base| root.join(format!("{base}{path}")).exists())
}

/// For `rocketraft_x::a::b::Item`, whether module `a::b` exists in crate `x` and, when the
/// path goes on past the module, whether the module defines its next segment.
fn rust_path_exists(root: &Path, path: &str) -> bool {
    let mut segments = path.split("::");
    let Some(crate_name) = segments.next() else {
        return false;
    };
    let Some(directory) = crate_directory(root, crate_name) else {
        return false;
    };
    let mut module = directory.join("src");
    let mut file = module.join("lib.rs");
    for segment in segments {
        let segment = segment.trim_end_matches("()");
        let as_file = module.join(format!("{segment}.rs"));
        let as_folder = module.join(segment).join("mod.rs");
        if as_file.exists() {
            file = as_file;
            module = module.join(segment);
        } else if as_folder.exists() {
            file = as_folder;
            module = module.join(segment);
        } else {
            return defines(&file, segment);
        }
    }
    true
}

fn crate_directory(root: &Path, crate_name: &str) -> Option<PathBuf> {
    let package = crate_name.replace('_', "-");
    let short = package.strip_prefix(PACKAGE_PREFIX)?;
    [
        short.to_owned(),
        format!("endpoints/{short}"),
        "client/cli".to_owned(),
    ]
    .into_iter()
    .map(|directory| root.join(directory))
    .find(|directory| {
        std::fs::read_to_string(directory.join("Cargo.toml"))
            .is_ok_and(|manifest| manifest.contains(&format!("name = \"{package}\"")))
    })
}

/// Whether `file` defines or re-exports an item, field or module named `name`.
fn defines(file: &Path, name: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(file) else {
        return false;
    };
    let kinds = [
        "fn",
        "struct",
        "enum",
        "const",
        "static",
        "type",
        "trait",
        "mod",
        "macro_rules!",
    ];
    kinds
        .iter()
        .any(|kind| text.contains(&format!("{kind} {name}")))
        || text.contains(&format!("::{name};"))
        || text.contains(&format!(" as {name};"))
        || text.contains(&format!("    {name}("))
}

#[test]
fn every_path_the_docs_name_exists() -> anyhow::Result<()> {
    let root = workspace_root();
    let mut missing = Vec::new();
    for document in documents()? {
        let text = std::fs::read_to_string(&document)?;
        let name = document
            .strip_prefix(&root)
            .unwrap_or(&document)
            .display()
            .to_string();
        for (line, word) in backticked(&text) {
            if let Some(path) = as_repository_path(word) {
                if !path_exists(&root, path) {
                    missing.push(format!("{name}:{line}: `{path}`"));
                }
            } else if word.starts_with("rocketraft_")
                && word.contains("::")
                && !rust_path_exists(&root, word)
            {
                missing.push(format!("{name}:{line}: `{word}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the docs name paths that do not exist:\n{}",
        missing.join("\n")
    );
    Ok(())
}

#[test]
fn the_checks_tell_a_real_path_from_a_missing_one() {
    let root = workspace_root();
    assert!(path_exists(&root, "broker/src/raft/log/store.rs"));
    assert!(path_exists(&root, "endpoints/proxy/"));
    assert!(!path_exists(&root, "broker/src/raft/log_store.rs"));
    assert!(!path_exists(&root, "../main/README.md"));
    assert_eq!(as_repository_path("https://example.com/a.md"), None);
    assert_eq!(as_repository_path("a b/c.rs"), None);
    assert!(rust_path_exists(
        &root,
        "rocketraft_broker::node::BrokerNode"
    ));
    assert!(rust_path_exists(&root, "rocketraft_domain::limits"));
    assert!(rust_path_exists(&root, "rocketraft_proxy::Proxy"));
    assert!(!rust_path_exists(
        &root,
        "rocketraft_broker::raft::log_store"
    ));
    assert!(!rust_path_exists(
        &root,
        "rocketraft_broker::node::NoSuchThing"
    ));
    let graph = graph_from_architecture(&format!(
        "{CRATE_GRAPH_MARKER}\n```text\nproto ->\ndomain -> proto\n```\n"
    ))
    .expect("a graph");
    assert_eq!(graph["proto"], BTreeSet::new());
    assert_eq!(graph["domain"], BTreeSet::from(["proto".to_owned()]));
}
