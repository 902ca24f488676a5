//! `mqadmin` fails with a non-zero exit and one line that says why.

use std::process::Command;

fn mqadmin(args: &[&str]) -> anyhow::Result<(bool, String)> {
    let output = Command::new(env!("CARGO_BIN_EXE_mqadmin"))
        .args(args)
        .output()?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[test]
fn given_failures_should_exit_non_zero_with_one_line() -> anyhow::Result<()> {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let cases = [
        (
            vec!["--namesrv", "127.0.0.1:1", "cluster-list"],
            "no nameserver answered",
        ),
        (
            vec![
                "--namesrv",
                "127.0.0.1:1",
                "send",
                "--topic",
                "bad topic!",
                "--body",
                "x",
            ],
            "topic rejected",
        ),
        (
            vec![
                "--namesrv",
                "127.0.0.1:1",
                "topic-status",
                "--topic",
                "Orders",
            ],
            "no nameserver answered",
        ),
    ];
    for (args, reason) in cases {
        let (ok, stderr) = mqadmin(&args)?;
        assert!(!ok, "{args:?} succeeded");
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.starts_with("mqadmin: ") && stderr.contains(reason),
            "{args:?}: {stderr}"
        );
    }
    Ok(())
}
