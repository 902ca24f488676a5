//! The `nameserver` binary: starts on the address it is given (a flag over its config file)
//! and says where it serves; refuses a bad setting with an error naming the key. Each process is killed when its test
//! has read what it needs.

use std::io::BufRead;
use std::io::BufReader;
use std::process::Command;
use std::process::Stdio;

/// Starts `nameserver` with `args` and reads its stdout up to the "serving on" line; the
/// process is killed then. Returns the lines logged before it and the address it names.
fn start_until_serving(args: &[&str]) -> anyhow::Result<(Vec<String>, std::net::SocketAddr)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nameserver"))
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut logged = Vec::new();
    let mut serving = None;
    for line in BufReader::new(stdout)
        .lines()
        .take(100)
        .map_while(Result::ok)
    {
        if let Some(addr) = line.trim().strip_prefix("nameserver serving on ") {
            serving = Some(addr.to_owned());
            break;
        }
        logged.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    let addr = serving.ok_or_else(|| anyhow::anyhow!("no \"nameserver serving on\" line"))?;
    Ok((logged, addr.parse()?))
}

#[test]
fn given_port_zero_it_serves_and_says_where() -> anyhow::Result<()> {
    // The flag wins over the file's address (a port nothing can serve on here).
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("nameserver.toml");
    std::fs::write(
        &config,
        "listen = \"192.0.2.1:9876\"\nbroker_expiry_ms = 60000\n",
    )?;
    let (_, addr) = start_until_serving(&[
        "--config",
        config.to_str().unwrap_or_default(),
        "--listen",
        "127.0.0.1:0",
    ])?;
    assert_ne!(addr.port(), 0, "the port the OS picked");
    Ok(())
}

#[test]
fn given_a_bad_setting_in_a_flag_or_the_file_it_refuses_to_start_naming_the_key()
-> anyhow::Result<()> {
    let run = |args: &[&str]| -> anyhow::Result<(bool, String)> {
        let output = Command::new(env!("CARGO_BIN_EXE_nameserver"))
            .args(args)
            .output()?;
        Ok((
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ))
    };
    let (ok, stderr) = run(&["--listen", "127.0.0.1:0", "--broker-expiry-ms", "0"])?;
    assert!(!ok);
    assert!(
        stderr.contains("config key `broker_expiry_ms`: must be positive"),
        "{stderr}"
    );
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("nameserver.toml");
    let path = config.to_str().unwrap_or_default();
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nexpiry = 5\n")?;
    let (ok, stderr) = run(&["--config", path])?;
    assert!(!ok, "an unknown key is refused");
    assert!(stderr.contains("config key `expiry`"), "{stderr}");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nbroker_expiry_ms = 0\n")?;
    let (ok, stderr) = run(&["--config", path])?;
    assert!(!ok, "a zero expiry from the file is refused");
    assert!(stderr.contains("config key `broker_expiry_ms`"), "{stderr}");
    let (ok, stderr) = run(&["--config", path, "--broker-expiry-ms", "0x"])?;
    assert!(!ok, "a malformed flag is refused");
    assert!(stderr.contains("--broker-expiry-ms"), "{stderr}");
    Ok(())
}

#[test]
fn given_log_format_json_each_log_line_is_a_json_object() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("nameserver.toml");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nlog_format = \"json\"\n")?;
    let (logged, _) = start_until_serving(&["--config", config.to_str().unwrap_or_default()])?;
    assert!(!logged.is_empty(), "the start is logged");
    for line in &logged {
        assert!(
            line.starts_with('{') && line.ends_with('}') && line.contains("\"level\":\"INFO\""),
            "not a JSON log line: {line}"
        );
    }
    Ok(())
}
