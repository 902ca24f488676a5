//! The `nameserver` binary: starts on the address it is given and says where it serves;
//! refuses a bad setting with a clear error. The process is killed when the test ends.

use std::io::BufRead;
use std::io::BufReader;
use std::process::Command;
use std::process::Stdio;

#[test]
fn given_port_zero_it_serves_and_says_where() -> anyhow::Result<()> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nameserver"))
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    // Log lines may come first.
    let serving = BufReader::new(stdout)
        .lines()
        .take(100)
        .map_while(Result::ok)
        .find_map(|line| {
            line.trim()
                .strip_prefix("nameserver serving on ")
                .map(str::to_owned)
        });
    let _ = child.kill();
    let _ = child.wait();
    let addr = serving.ok_or_else(|| anyhow::anyhow!("no \"nameserver serving on\" line"))?;
    let addr: std::net::SocketAddr = addr.parse()?;
    assert_ne!(addr.port(), 0, "the port the OS picked");
    Ok(())
}

#[test]
fn given_a_zero_expiry_it_refuses_to_start() -> anyhow::Result<()> {
    let output = Command::new(env!("CARGO_BIN_EXE_nameserver"))
        .args(["--listen", "127.0.0.1:0", "--broker-expiry-ms", "0"])
        .output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--broker-expiry-ms must be positive"),
        "{stderr}"
    );
    Ok(())
}
