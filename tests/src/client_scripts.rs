//! Real clients from the package registries, run as child processes: each client's script
//! (under `tests/<dir>/`) drives a cluster and prints a JSON report on its last line, which
//! the test judges. `.ci/run` installs them; on a machine without them a test says why and
//! passes, unless [`REQUIRED_ENV`] is `required` (CI), where a missing client fails it.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

/// Set to `required` where a missing client must fail its test (CI).
pub const REQUIRED_ENV: &str = "RR_CLIENT_TESTS";

/// How to run one client's script.
pub struct ClientScript {
    /// Its directory under `tests/`.
    pub dir: &'static str,
    /// The interpreter, relative to the directory (or on PATH), and the script.
    pub interpreter: &'static str,
    pub script: &'static str,
    /// What must exist in the directory once the client is installed.
    pub installed: &'static str,
    /// The command that installs it, for the message when it is missing.
    pub install: &'static str,
}

impl ClientScript {
    pub fn dir(&self) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(self.dir)
    }

    /// The interpreter: a path inside the directory, or a name looked up on PATH.
    pub fn program(&self) -> PathBuf {
        if self.interpreter.contains('/') {
            self.dir().join(self.interpreter)
        } else {
            PathBuf::from(self.interpreter)
        }
    }

    /// Why the client cannot run here, if it cannot.
    fn missing(&self) -> Option<String> {
        let installed = self.dir().join(self.installed);
        if !installed.exists() {
            return Some(format!(
                "{} is missing: run `{}`",
                installed.display(),
                self.install
            ));
        }
        let runs = std::process::Command::new(self.program())
            .arg("--version")
            .output();
        (!runs.is_ok_and(|output| output.status.success()))
            .then(|| format!("`{}` does not run here", self.interpreter))
    }

    /// Whether the client can run here. `false` (the test should pass, having said why) if
    /// it is not installed; an error if it is missing where [`REQUIRED_ENV`] requires it.
    pub fn ready(&self) -> anyhow::Result<bool> {
        let Some(missing) = self.missing() else {
            return Ok(true);
        };
        anyhow::ensure!(
            std::env::var(REQUIRED_ENV).as_deref() != Ok("required"),
            "the {} client is required ({REQUIRED_ENV}) but {missing}",
            self.dir
        );
        eprintln!("skipped: {missing}");
        Ok(false)
    }

    /// Runs the script with `args` and `envs` for at most `timeout`; returns the JSON report
    /// on its last line. A script that fails or prints no report is an error showing its
    /// output.
    pub async fn run(
        &self,
        args: &[&str],
        envs: &[(&str, String)],
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        let script = tokio::process::Command::new(self.program())
            .arg(self.script)
            .args(args)
            .envs(envs.iter().map(|(name, value)| (name, value)))
            .current_dir(self.dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(timeout, script)
            .await
            .with_context(|| format!("the {} script timed out after {timeout:?}", self.dir))??;
        let stdout = String::from_utf8_lossy(&output.stdout);
        anyhow::ensure!(
            output.status.success(),
            "the {} script failed ({}): {stdout}\n{}",
            self.dir,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .with_context(|| format!("the {} script's report: {stdout}", self.dir))
    }
}
