//! Hosts on one machine, for tests where a host vanishes from the network rather than a
//! process dying: network namespaces joined by a bridge.
//!
//! A [`Lab`] owns everything it creates: a "switch" namespace holding bridge `br0`, and per
//! host a namespace whose `eth0` (`10.A.B.n/24`, one subnet per lab) is one end of a veth
//! pair; the other end (`h<n>`) is a port of the bridge. Faults act on a host's link:
//! [`Lab::cut`] takes the switch-side end down (a blackhole: no RST, no ICMP, packets
//! vanish), [`Lab::heal`] brings it back, [`Lab::set_loss`] and [`Lab::set_delay`] add netem
//! where the kernel has it. [`Lab::spawn`] runs a process on a host; [`Lab::in_host`] runs
//! async client code of the test itself there.
//!
//! Invariant: everything a lab creates it removes when dropped, also on panic: it kills
//! (SIGKILL) every process it started and deletes its namespaces, and with them the veths
//! and the bridge. Addresses live only inside the lab's namespaces; nothing is configured in
//! the machine's own namespace, so nothing leaves the machine. Names carry the pid and a
//! counter, so the labs of parallel tests never collide.
//!
//! It needs root and `ip` (iproute2). [`skip_unless_available`] lets a test pass with a
//! message where that is missing, except under `RR_NETNS_TESTS=required` (CI).
//!
//! [`crate::lab_cluster::LabCluster`] builds the cluster of `deploy/` on a lab.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::future::Future;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use anyhow::bail;

/// Set to `required` where a lab that cannot be built must fail its test (CI, as root).
pub const REQUIRED_ENV: &str = "RR_NETNS_TESTS";
/// Every namespace a lab makes is named `rr<pid>x<lab>...`.
const NAME_PREFIX: &str = "rr";
const BRIDGE: &str = "br0";
const HOST_IFACE: &str = "eth0";
/// Where `ip netns` keeps its namespaces.
const NETNS_DIR: &str = "/run/netns";
/// Worker threads of the runtime [`Lab::in_host`] builds.
const IN_HOST_WORKERS: usize = 2;
/// How long [`Lab::in_host`] lets tasks still running at its end wind down.
const IN_HOST_SHUTDOWN: Duration = Duration::from_secs(1);

/// Labs made by this process so far: the second part of their names.
static LABS: AtomicU32 = AtomicU32::new(0);

/// Whether a lab can be built here; if not, prints `skipped: <reason>` and returns true, so
/// the test returns early: `if skip_unless_available() { return Ok(()); }`. Under
/// `RR_NETNS_TESTS=required` it panics with the reason instead.
pub fn skip_unless_available() -> bool {
    match Lab::available() {
        Ok(()) => false,
        Err(reason) => {
            if std::env::var(REQUIRED_ENV).as_deref() == Ok("required") {
                panic!("{REQUIRED_ENV}=required, but a multi-host lab cannot be built: {reason}");
            }
            println!("skipped: {reason}");
            true
        }
    }
}

/// A process a lab started on one of its hosts.
struct Spawned {
    what: String,
    child: Child,
}

/// Hosts as network namespaces on one bridge; see the module comment.
pub struct Lab {
    name: String,
    subnet: [u8; 2],
    switch: String,
    /// Host `n`'s namespace at index `n - 1`.
    hosts: Vec<String>,
    /// Every namespace made so far, in order: deleted in reverse on drop.
    namespaces: Vec<String>,
    children: Mutex<Vec<Spawned>>,
    /// netem settings per host: (loss percent, delay ms).
    netem: Mutex<BTreeMap<usize, (f64, u64)>>,
}

impl Lab {
    /// Whether labs can be built here: root, and `ip netns` making a namespace with a bridge
    /// and a veth pair. The reason if not. Probed once per process.
    pub fn available() -> Result<(), String> {
        static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
        PROBE.get_or_init(probe).clone()
    }

    /// Builds a lab of `hosts` hosts (numbered from 1), each linked to the switch.
    pub fn new(hosts: usize) -> anyhow::Result<Lab> {
        anyhow::ensure!(
            (1..=250).contains(&hosts),
            "a lab has 1 to 250 hosts, not {hosts}"
        );
        sweep_stale_namespaces();
        let pid = std::process::id();
        let index = LABS.fetch_add(1, Ordering::Relaxed);
        let name = format!("{NAME_PREFIX}{pid}x{index}");
        // One /24 per lab, from the pid and the counter: parallel labs differ.
        let spread = pid.wrapping_mul(64).wrapping_add(index) % 65536;
        let mut lab = Lab {
            subnet: [(spread >> 8) as u8, (spread & 0xff) as u8],
            switch: format!("{name}sw"),
            name,
            hosts: Vec::new(),
            namespaces: Vec::new(),
            children: Mutex::new(Vec::new()),
            netem: Mutex::new(BTreeMap::new()),
        };
        // Whatever fails half-way is removed by the lab's drop.
        let switch = lab.switch.clone();
        lab.add_namespace(&switch)?;
        ip(&["-n", &switch, "link", "add", BRIDGE, "type", "bridge"])?;
        ip(&["-n", &switch, "link", "set", BRIDGE, "up"])?;
        for host in 1..=hosts {
            let ns = format!("{}h{host}", lab.name);
            lab.add_namespace(&ns)?;
            lab.hosts.push(ns.clone());
            let port = switch_port(host);
            // Made inside the host's namespace, its peer inside the switch's: the names only
            // need to be unique there.
            ip(&[
                "-n", &ns, "link", "add", HOST_IFACE, "type", "veth", "peer", "name", &port,
                "netns", &switch,
            ])?;
            let addr = format!("{}/24", lab.addr(host));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", HOST_IFACE])?;
            ip(&["-n", &ns, "link", "set", HOST_IFACE, "up"])?;
            ip(&["-n", &switch, "link", "set", &port, "master", BRIDGE])?;
            ip(&["-n", &switch, "link", "set", &port, "up"])?;
        }
        Ok(lab)
    }

    /// Makes namespace `ns` (remembered for deletion) with its loopback up.
    fn add_namespace(&mut self, ns: &str) -> anyhow::Result<()> {
        ip(&["netns", "add", ns])?;
        self.namespaces.push(ns.to_owned());
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        Ok(())
    }

    /// The lab's name: the prefix of its namespaces.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn host_count(&self) -> usize {
        self.hosts.len()
    }

    /// Host `host`'s address.
    pub fn addr(&self, host: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.subnet[0], self.subnet[1], host as u8)
    }

    /// The host whose address is `addr`, if it is one of this lab's.
    pub fn host_of(&self, addr: Ipv4Addr) -> Option<usize> {
        let [ten, a, b, host] = addr.octets();
        let host = host as usize;
        ([ten, a, b] == [10, self.subnet[0], self.subnet[1]]
            && (1..=self.hosts.len()).contains(&host))
        .then_some(host)
    }

    /// Host `host`'s namespace.
    pub fn namespace(&self, host: usize) -> &str {
        assert!(
            (1..=self.hosts.len()).contains(&host),
            "lab {} has hosts 1 to {}, not {host}",
            self.name,
            self.hosts.len()
        );
        &self.hosts[host - 1]
    }

    /// Takes host `host`'s link down at the switch: its packets, and those sent to it, vanish
    /// without an answer (no RST, no ICMP), as when a host loses power or its switch port.
    pub fn cut(&self, host: usize) -> anyhow::Result<()> {
        self.set_link(host, "down")
    }

    /// Brings host `host`'s link back up.
    pub fn heal(&self, host: usize) -> anyhow::Result<()> {
        self.set_link(host, "up")
    }

    fn set_link(&self, host: usize, state: &str) -> anyhow::Result<()> {
        self.namespace(host);
        ip(&["-n", &self.switch, "link", "set", &switch_port(host), state])?;
        Ok(())
    }

    /// Drops `percent` of the packets to and from host `host` (netem on both ends of its link;
    /// 0 stops). Fails with a clear error where the kernel has no netem.
    pub fn set_loss(&self, host: usize, percent: f64) -> anyhow::Result<()> {
        anyhow::ensure!(
            (0.0..=100.0).contains(&percent),
            "loss is a percentage, not {percent}"
        );
        self.set_netem(host, |settings| settings.0 = percent)
    }

    /// Delays each packet to and from host `host` by `ms` (netem on both ends of its link, so
    /// a round trip with the host takes 2 `ms` more; 0 stops). Fails with a clear error where
    /// the kernel has no netem.
    pub fn set_delay(&self, host: usize, ms: u64) -> anyhow::Result<()> {
        self.set_netem(host, |settings| settings.1 = ms)
    }

    fn set_netem(&self, host: usize, change: impl FnOnce(&mut (f64, u64))) -> anyhow::Result<()> {
        let host_ns = self.namespace(host).to_owned();
        let mut netem = self
            .netem
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut settings = netem.get(&host).copied().unwrap_or((0.0, 0));
        change(&mut settings);
        let (loss, delay) = settings;
        let port = switch_port(host);
        for (ns, dev) in [
            (self.switch.as_str(), port.as_str()),
            (&host_ns, HOST_IFACE),
        ] {
            let delay = format!("{delay}ms");
            let loss = format!("{loss}%");
            let args = [
                "-n", ns, "qdisc", "replace", "dev", dev, "root", "netem", "delay", &delay, "loss",
                &loss,
            ];
            run("tc", &args).map_err(|error| {
                if format!("{error:#}").contains("qdisc kind is unknown") {
                    error.context("netem is not available in this kernel (no sch_netem)")
                } else {
                    error
                }
            })?;
        }
        netem.insert(host, settings);
        Ok(())
    }

    /// Starts `program` with `args` on host `host` (`ip netns exec`), its stdout and stderr
    /// appended to `log`; returns its pid. The lab kills it (SIGKILL) when dropped; so does
    /// the kernel if the thread that called this ends first (`PR_SET_PDEATHSIG`, so a test
    /// process that is killed leaves no server behind): call it from the test's own thread.
    pub fn spawn(
        &self,
        host: usize,
        program: &Path,
        args: impl IntoIterator<Item = impl AsRef<OsStr>>,
        log: &Path,
    ) -> anyhow::Result<u32> {
        let ns = self.namespace(host);
        let what = format!("{} on host {host}", program.display());
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("open log {}", log.display()))?;
        let err = out.try_clone().context("clone a log handle")?;
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", ns])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        // SAFETY: the closure runs in the child between fork and exec and calls only
        // prctl(2), which is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .with_context(|| format!("start {what} (`ip netns exec {ns} ...`)"))?;
        let pid = child.id();
        self.children
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(Spawned { what, child });
        Ok(pid)
    }

    /// SIGKILLs the process `pid` this lab started, and reaps it.
    pub fn kill(&self, pid: u32) {
        let mut children = self
            .children
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(index) = children.iter().position(|s| s.child.id() == pid) {
            let mut spawned = children.swap_remove(index);
            kill_and_reap(&mut spawned);
        }
    }

    /// Runs the future `make` returns on host `host`: on a thread of its own that enters the
    /// host's network namespace and builds a tokio runtime there (whose threads inherit the
    /// namespace), so every socket it opens is the host's. The thread starts at once, before
    /// the returned future is awaited; awaiting it gives the result, and a panic on the
    /// thread panics the caller.
    pub fn in_host<T, F, Fut>(
        &self,
        host: usize,
        make: F,
    ) -> impl Future<Output = anyhow::Result<T>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T>,
    {
        let ns = self.namespace(host).to_owned();
        let path = Path::new(NETNS_DIR).join(&ns);
        let (done, result) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("in-host-{host}"))
            .spawn(move || {
                let outcome = enter_namespace(&path).and_then(|()| {
                    let runtime = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(IN_HOST_WORKERS)
                        .enable_all()
                        .build()
                        .context("build a tokio runtime")?;
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        runtime.block_on(make())
                    }));
                    runtime.shutdown_timeout(IN_HOST_SHUTDOWN);
                    Ok(ran)
                });
                let _ = done.send(outcome);
            })
            .with_context(|| format!("start a thread for host {host} ({ns})"));
        async move {
            spawned?;
            match result.await {
                Ok(Ok(Ok(value))) => Ok(value),
                Ok(Ok(Err(panic))) => std::panic::resume_unwind(panic),
                Ok(Err(error)) => Err(error),
                Err(_) => bail!("the thread running on host {host} ended without a result"),
            }
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let children = std::mem::take(
            self.children
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for mut spawned in children {
            kill_and_reap(&mut spawned);
        }
        for ns in self.namespaces.iter().rev() {
            if let Err(error) = ip(&["netns", "del", ns]) {
                eprintln!("lab {}: {error:#}", self.name);
            }
        }
    }
}

fn kill_and_reap(spawned: &mut Spawned) {
    if let Err(error) = spawned.child.kill() {
        eprintln!("kill {}: {error}", spawned.what);
    }
    let _ = spawned.child.wait();
}

/// The switch-side end of host `host`'s link, in the switch's namespace.
fn switch_port(host: usize) -> String {
    format!("h{host}")
}

/// Moves the calling thread into the network namespace at `path`.
fn enter_namespace(path: &Path) -> anyhow::Result<()> {
    let file = File::open(path).with_context(|| format!("open {}", path.display()))?;
    // SAFETY: setns(2) on a namespace fd this function holds open; it changes only the
    // calling thread's network namespace.
    let entered = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if entered != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("setns({}, CLONE_NEWNET)", path.display()));
    }
    Ok(())
}

/// Whether a lab can be built here; see [`Lab::available`].
fn probe() -> Result<(), String> {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("network namespaces need root (CI runs these tests as root)".into());
    }
    let ns = format!("{NAME_PREFIX}{}probe", std::process::id());
    ip(&["netns", "add", &ns]).map_err(|error| format!("{error:#}"))?;
    let tried = ip(&["-n", &ns, "link", "add", BRIDGE, "type", "bridge"])
        .and_then(|_| {
            ip(&[
                "-n", &ns, "link", "add", HOST_IFACE, "type", "veth", "peer", "name", "h1",
            ])
        })
        .map(|_| ())
        .map_err(|error| format!("{error:#}"));
    let deleted = ip(&["netns", "del", &ns])
        .map(|_| ())
        .map_err(|error| format!("{error:#}"));
    tried.and(deleted)
}

/// Deletes the namespaces of labs whose process is gone (killed before its labs' drops ran).
fn sweep_stale_namespaces() {
    let Ok(list) = ip(&["netns", "list"]) else {
        return;
    };
    for line in list.lines() {
        let Some(ns) = line.split_whitespace().next() else {
            continue;
        };
        let Some(rest) = ns.strip_prefix(NAME_PREFIX) else {
            continue;
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let tail = &rest[digits.len()..];
        let ours = tail.starts_with('x') || tail == "probe";
        let Ok(pid) = digits.parse::<libc::pid_t>() else {
            continue;
        };
        // SAFETY: kill(2) with signal 0 only checks whether `pid` exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if ours && gone {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

fn ip(args: &[&str]) -> anyhow::Result<String> {
    run("ip", args)
}

/// Runs `program` with `args`; its stdout, or an error naming the command and its stderr.
fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let command = format!("`{program} {}`", args.join(" "));
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run {command}"))?;
    if !output.status.success() {
        bail!(
            "{command} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
