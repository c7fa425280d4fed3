//! A pod made by hand for the container tests: the cgroup, namespaces and files kubelet and
//! containerd give a pod's process (no Kubernetes on this host).
use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

/// A process killed and reaped on drop.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub const POD_UID: &str = "5f0c3a2e-8b1d-4c6e-9a7f-1e2d3c4b5a69";
pub const CONTAINER_ID: &str = "c0ffee00d15ea5e0123456789abcdef0123456789abcdef0123456789abcdef0";
pub const POD_NAME: &str = "llama-train-0";

/// A process in a pod made by hand as kubelet and containerd make one: its cgroup named like
/// kubepods' (`kubepods-pod<uid>.slice/cri-containerd-<id>.scope`), its own UTS namespace whose
/// hostname is the pod's name, that name in its `/etc/hostname` (bind-mounted, as the runtime
/// does) and the service account's namespace file, all in a mount namespace of its own (the
/// host's files are untouched). `cmd` is exec'd inside. Returns the child and its cgroup dirs.
pub fn start_in_pod(cmd: &[&str]) -> (Reaped, std::path::PathBuf) {
    let dir = std::path::PathBuf::from("/sys/fs/cgroup/pids")
        .join("kubepods.slice")
        .join(format!("kubepods-pod{}.slice", POD_UID.replace('-', "_")))
        .join(format!("cri-containerd-{CONTAINER_ID}.scope"));
    std::fs::create_dir_all(&dir).expect("a pod-shaped cgroup under /sys/fs/cgroup/pids");
    let script = format!(
        "set -e; echo $$ > {procs}; mount -t tmpfs tmpfs /run; \
         mkdir -p /run/secrets/kubernetes.io/serviceaccount; \
         printf ml > /run/secrets/kubernetes.io/serviceaccount/namespace; \
         echo {POD_NAME} > /run/hostname; mount --bind /run/hostname /etc/hostname; hostname {POD_NAME}; \
         exec \"$@\"",
        procs = dir.join("cgroup.procs").display()
    );
    let child = Command::new("unshare")
        .args(["-u", "-m", "--propagation", "private", "sh", "-c", &script, "sh"])
        .args(cmd)
        .env("HOSTNAME", POD_NAME)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare");
    (Reaped(child), dir)
}

/// Waits until `pid` runs `comm` (the shell above has exec'd it) in the pod's cgroup.
pub fn wait_in_pod(pid: u32, comm: &str) {
    for _ in 0..200 {
        let c = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let g = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if c.trim() == comm && g.contains(CONTAINER_ID) {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("pid {pid} did not start {comm} in the pod's cgroup");
}

/// Removes the pod's cgroup dirs once the child is reaped.
pub fn remove_pod_cgroup(dir: &std::path::Path) {
    for d in dir.ancestors().take(3) {
        for _ in 0..100 {
            match std::fs::remove_dir(d) {
                Ok(()) => break,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break,
            }
        }
    }
}
