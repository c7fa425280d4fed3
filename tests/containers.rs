//! Processes in containers and pods, and the agent in a PID namespace of its own, with real
//! namespaces and a real runtime: `unshare` (PID, UTS, mount namespaces), `podman run --rootfs`
//! (no image: a root made here), and a pod-shaped cgroup made by hand under /sys/fs/cgroup.
//! Needs root and TIERSCOPE_BIN (`cargo xtask test` sets it).
use std::process::{Command, Stdio};

use tierscope_tests::{
    pod::{remove_pod_cgroup, start_in_pod, wait_in_pod, Reaped, CONTAINER_ID, POD_NAME, POD_UID},
    process, require_root_and_agent, run_tierscope, scratch_dir, tierscope_bin,
};

fn bin() -> String {
    tierscope_bin().expect("TIERSCOPE_BIN")
}

fn text(o: &std::process::Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The agent's watching commands stop at once, in one line naming the fix, in a PID namespace
/// of their own; `check` fails with the same fix. The host's `check` does not say it.
#[test]
#[ignore = "needs root and TIERSCOPE_BIN"]
fn the_agent_refuses_a_pid_namespace_of_its_own() {
    require_root_and_agent!();
    let dir = scratch_dir("containers", "pidns");
    let session = dir.join("s.tscope");
    let commands: [Vec<&str>; 3] = [
        vec!["snapshot", "--json", "--duration", "1"],
        vec!["run"],
        vec!["record", "-o", session.to_str().unwrap(), "--", "true"],
    ];
    for args in &commands {
        let out = Command::new("unshare")
            .args(["-pf", "--mount-proc", &bin()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("unshare (util-linux)");
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{args:?} ran in a PID namespace: {stdout}{stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: not one line: {stderr}");
        for want in ["PID namespace of its own", "hostPID: true", "--pid=host"] {
            assert!(lines[0].contains(want), "{args:?}: {want:?} missing: {}", lines[0]);
        }
        assert!(stdout.is_empty(), "{args:?} printed {stdout}");
        assert!(!session.exists(), "record wrote a session before refusing");
    }
    let out = Command::new("unshare").args(["-pf", "--mount-proc", &bin(), "check"]).output().expect("unshare");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "check in a PID namespace: {stdout}{stderr}");
    let missing = stdout.lines().find(|l| l.starts_with("missing") && l.contains("the host's PID namespace"));
    let missing = missing.unwrap_or_else(|| panic!("check does not say it: {stdout}"));
    assert!(missing.contains("hostPID: true") && missing.contains("--pid=host"), "{missing}");
    // In JSON too.
    let out =
        Command::new("unshare").args(["-pf", "--mount-proc", &bin(), "check", "--json"]).output().expect("unshare");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("check --json");
    assert!(v["missing"].as_array().unwrap().iter().any(|m| m["what"] == "the host's PID namespace"), "{v}");
    // The host's check has no such line.
    let (host, _) = text(&run_tierscope(&["check"]));
    assert!(!host.contains("PID namespace"), "the host's check: {host}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Runs a snapshot of `pid` and returns its `container` object.
fn container_of(pid: u32) -> serde_json::Value {
    let out = run_tierscope(&["snapshot", "--json", "--duration", "1", "--pid", &pid.to_string()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "snapshot failed: {stderr}");
    let snap: serde_json::Value = serde_json::from_str(&stdout).expect("snapshot JSON");
    let c = process(&snap, pid)["container"].clone();
    assert!(c.is_object(), "no container object: {c}");
    c
}

fn podman(args: &[&str]) -> std::process::Output {
    // runc: crun refuses this machine's hybrid cgroup layout; rlimits below the machine's
    // (podman's defaults raise them, which needs CAP_SYS_RESOURCE here).
    Command::new("podman")
        .args(["--runtime", "runc"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("podman (cargo xtask setup installs it)")
}

struct PodmanContainer(String);

impl Drop for PodmanContainer {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "0", &self.0]);
    }
}

/// `podman run --rootfs` (a root of the host's /usr, no image): the snapshot's container id is
/// podman's, its runtime podman, its name the one given (from podman's container store), and
/// there is no pod. A host process beside it has all fields null.
#[test]
#[ignore = "needs root, podman and TIERSCOPE_BIN"]
fn a_podman_container_is_named_by_its_id_runtime_and_name() {
    require_root_and_agent!();
    let root = scratch_dir("containers", "podman-root");
    for d in ["usr", "etc", "proc", "sys", "dev", "tmp", "run", "var"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for (link, to) in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")] {
        std::os::unix::fs::symlink(to, root.join(link)).unwrap();
    }
    let name = format!("tierscope-ident-{}", std::process::id());
    let _ = podman(&["rm", "-f", "-t", "0", &name]);
    let out = podman(&[
        "run",
        "-d",
        "--network=none",
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
        "-v",
        "/usr:/usr:ro",
        "--name",
        &name,
        "--rootfs",
        root.to_str().unwrap(),
        "sleep",
        "120",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "podman run: {stdout}{stderr}");
    let guard = PodmanContainer(name.clone());
    let inspect = podman(&["inspect", "-f", "{{.Id}} {{.State.Pid}}", &name]);
    let (line, _) = text(&inspect);
    let (id, pid) = line.trim().split_once(' ').expect("podman inspect");
    let pid: u32 = pid.parse().expect("container pid");
    assert_eq!(id.len(), 64, "{line}");
    let c = container_of(pid);
    assert_eq!(c["id"], id, "{c}");
    assert_eq!(c["runtime"], "podman", "{c}");
    assert_eq!(c["name"], name.as_str(), "{c}");
    assert_eq!(c["sources"]["name"], "runtime_state", "{c}");
    for k in ["pod_uid", "pod_name", "pod_namespace"] {
        assert!(c[k].is_null(), "{k} of a podman container: {c}");
    }
    drop(guard);
    let host = Reaped(Command::new("sleep").arg("30").spawn().unwrap());
    let c = container_of(host.0.id());
    for k in ["id", "runtime", "pod_uid", "pod_name", "pod_namespace", "name"] {
        assert!(c[k].is_null(), "{k} of a host process: {c}");
    }
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN"]
fn a_pod_shaped_process_is_named_by_its_pod() {
    require_root_and_agent!();
    let (child, dir) = start_in_pod(&["sleep", "60"]);
    let pid = child.0.id();
    wait_in_pod(pid, "sleep");
    let c = container_of(pid);
    assert_eq!(c["id"], CONTAINER_ID, "{c}");
    assert_eq!(c["runtime"], "containerd", "{c}");
    assert_eq!(c["pod_uid"], POD_UID, "{c}");
    assert_eq!(c["pod_name"], POD_NAME, "{c}");
    // No containerd here: the name is the pod's hostname, read from the container's own root.
    assert_eq!(c["sources"]["pod_name"], "hostname_file", "{c}");
    assert_eq!(c["pod_namespace"], "ml", "{c}");
    assert_eq!(c["sources"]["pod_namespace"], "service_account", "{c}");
    assert!(c["name"].is_null(), "no runtime state names the container: {c}");
    drop(child);
    remove_pod_cgroup(&dir);
}
