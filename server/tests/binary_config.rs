//! The `broker` binary refuses a bad configuration at start, naming the key, and exits
//! non-zero without binding or writing anything.

use std::process::Command;

fn run_broker(args: &[&str]) -> anyhow::Result<(bool, String)> {
    let output = Command::new(env!("CARGO_BIN_EXE_broker"))
        .args(args)
        .output()?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[test]
fn given_bad_keys_when_starting_should_exit_naming_the_key() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path().join("data");
    let config = dir.path().join("broker.toml");
    let base = format!(
        "group = \"broker-a\"\nnode_id = 1\nlisten = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n[peers]\n1 = \"127.0.0.1:1\"\n",
        data_dir.display()
    );
    let cases = [
        (format!("{base}flush = \"sometimes\"\n"), "flush"),
        (base.replace("node_id = 1", "node_id = 2"), "node_id"),
        (
            base.replace("1 = \"127.0.0.1:1\"", "one = \"127.0.0.1:1\""),
            "peers.one",
        ),
        (format!("colour = \"blue\"\n{base}"), "colour"),
    ];
    for (text, key) in cases {
        std::fs::write(&config, &text)?;
        let (ok, stderr) = run_broker(&["--config", config.to_str().unwrap_or_default()])?;
        assert!(!ok, "broker started with a bad `{key}`:\n{text}");
        assert!(stderr.contains(key), "the error names `{key}`: {stderr}");
    }
    std::fs::write(&config, &base)?;
    let (ok, stderr) = run_broker(&[
        "--config",
        config.to_str().unwrap_or_default(),
        "--node-id",
        "7",
    ])?;
    assert!(!ok, "a flag is checked like the file");
    assert!(
        stderr.contains("config key `node_id`: 7 is not one of the peers"),
        "{stderr}"
    );
    assert!(!data_dir.exists(), "nothing was written");
    Ok(())
}
