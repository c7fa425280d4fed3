//! Kubernetes pod and container identity from a `/proc/PID/cgroup` text: the value the
//! collector reads for each process and the exporter for itself, and its pure parser.
//!
//! The shapes kubelet and the runtimes use (docs/containers.md lists where each comes from):
//! - systemd driver: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope`
//!   (`crio-<id>.scope` for CRI-O, `docker-<id>.scope` for dockershim/cri-dockerd;
//!   `kubepods-pod<uid>.slice` for a Guaranteed pod)
//! - containerd's v1 systemd form: `.../kubepods-besteffort-pod<uid>.slice:cri-containerd:<id>`
//! - cgroupfs driver: `/kubepods/burstable/pod<uid>/<id>` (the runtime is not in the path)
//! - outside Kubernetes: `/system.slice/docker-<id>.scope`, `/docker/<id>`, `libpod-<id>.scope`,
//!   `/libpod_parent/libpod-<id>` (podman's cgroupfs manager), `libpod-payload-<id>` (podman
//!   inside a pod's infra), a rootless `user@1000.service/.../libpod-<id>.scope`.
//!
//! A runtime's monitor (`crio-conmon-<id>.scope`, `libpod-conmon-<id>.scope`) is not the
//! container: its processes get no container id. Paths outside the reader's cgroup namespace
//! start with `/..`; those segments name nothing and are skipped.
use serde::{Deserialize, Serialize};

/// The runtime that made the container, from its cgroup segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    Containerd,
    CriO,
    Docker,
    Podman,
}

impl Runtime {
    /// The `container.runtime` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Docker => "docker",
            Runtime::Podman => "podman",
        }
    }
}

/// What the cgroup path says about the workload's pod and container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupIdentity {
    /// `k8s.pod.uid`, with dashes.
    pub pod_uid: Option<String>,
    /// `container.id`: 64 hex characters, lower case.
    pub container_id: Option<String>,
    /// The runtime the segment that named the container shows (`None` for a bare id).
    pub runtime: Option<Runtime>,
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn pod_uid(segment: &str) -> Option<String> {
    // `kubepods-burstable-pod<uid>.slice` or `pod<uid>`; containerd's v1 systemd form puts
    // `:cri-containerd:<id>` after the slice.
    let s = segment.split(':').next().unwrap_or(segment);
    let s = s.strip_suffix(".slice").unwrap_or(s);
    let at = s.rfind("pod")?;
    // Only `pod<uid>` itself or the kubepods slices' `-pod<uid>`.
    if at != 0 && !s[..at].ends_with('-') {
        return None;
    }
    let uid = s[at + 3..].replace('_', "-");
    let ok = uid.len() == 36
        && uid
            .bytes()
            .enumerate()
            .all(|(i, b)| if [8, 13, 18, 23].contains(&i) { b == b'-' } else { b.is_ascii_hexdigit() });
    ok.then_some(uid)
}

/// The prefixes runtimes put before the id, longest first (`libpod-payload-` before `libpod-`).
const PREFIXES: &[(&str, Option<Runtime>)] = &[
    ("cri-containerd-", Some(Runtime::Containerd)),
    ("crio-conmon-", None),
    ("crio-", Some(Runtime::CriO)),
    ("docker-", Some(Runtime::Docker)),
    ("libpod-conmon-", None),
    ("libpod-payload-", Some(Runtime::Podman)),
    ("libpod-", Some(Runtime::Podman)),
];

/// A segment that names a container: `Some((id, runtime))`; a monitor's segment is `Some` with
/// no id, so that it stops the search (`Err`).
fn container_segment(segment: &str, parent: Option<&str>) -> Option<Result<(String, Option<Runtime>), ()>> {
    // containerd v1 systemd form: `<slice>:cri-containerd:<id>`.
    if let Some((_, rest)) = segment.split_once(':') {
        let (kind, id) = rest.rsplit_once(':')?;
        let runtime = match kind {
            "cri-containerd" => Some(Runtime::Containerd),
            "crio" => Some(Runtime::CriO),
            "docker" => Some(Runtime::Docker),
            _ => None,
        };
        return is_container_id(id).then(|| Ok((id.to_ascii_lowercase(), runtime)));
    }
    let s = segment.strip_suffix(".scope").unwrap_or(segment);
    for &(prefix, runtime) in PREFIXES {
        if let Some(id) = s.strip_prefix(prefix) {
            if !is_container_id(id) {
                return None;
            }
            return Some(match runtime {
                Some(r) => Ok((id.to_ascii_lowercase(), Some(r))),
                None => Err(()),
            });
        }
    }
    // A bare id: docker's cgroupfs `/docker/<id>`, or kubelet's cgroupfs `pod<uid>/<id>`.
    if is_container_id(s) {
        let runtime = (parent == Some("docker")).then_some(Runtime::Docker);
        return Some(Ok((s.to_ascii_lowercase(), runtime)));
    }
    None
}

/// The cgroup v2 path of a `/proc/PID/cgroup` text (its `0::` line), where the cgroup's own
/// files are below the v2 mount. `None` without one, or for a path outside the reader's cgroup
/// namespace (`/..`), which names no directory the reader can open.
pub fn unified_path(text: &str) -> Option<String> {
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?.trim_end();
    let inside = path.starts_with('/') && !path.split('/').any(|s| s == "..");
    inside.then(|| path.to_string())
}

/// Parses the cgroup file: the v2 line (`0::/path`) or any v1 line, whichever names a pod or
/// container first. The innermost container segment wins (docker in docker, a podman
/// container's own `container` subgroup sits below its scope).
pub fn parse(text: &str) -> CgroupIdentity {
    let mut id = CgroupIdentity::default();
    for line in text.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else { continue };
        let mut parent = None;
        for seg in path.split('/').filter(|s| !s.is_empty() && *s != "..") {
            if id.pod_uid.is_none() {
                id.pod_uid = pod_uid(seg);
            }
            match container_segment(seg, parent) {
                Some(Ok((c, runtime))) => {
                    id.container_id = Some(c);
                    id.runtime = runtime;
                }
                Some(Err(())) => {
                    id.container_id = None;
                    id.runtime = None;
                    break;
                }
                None => {}
            }
            parent = Some(seg);
        }
        if id.pod_uid.is_some() || id.container_id.is_some() {
            break;
        }
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    const CID: &str = "3f1c9a0e7b2d4c5e8f6a1b2c3d4e5f60718293a4b5c6d7e8f9012345678abcde";
    const UID: &str = "8a1d2c3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e";
    const UID_: &str = "8a1d2c3e_4f5a_6b7c_8d9e_0f1a2b3c4d5e";

    fn id(pod: Option<&str>, runtime: Option<Runtime>) -> CgroupIdentity {
        CgroupIdentity { pod_uid: pod.map(Into::into), container_id: Some(CID.into()), runtime }
    }

    /// Real-world lines, one per runtime and driver (ids replaced by `{CID}`, uids by `{UID}` or
    /// `{UID_}`), and what each must give.
    #[test]
    fn every_runtime_and_driver() {
        let table: &[(String, CgroupIdentity)] = &[
            // containerd, systemd driver, each QoS class.
            (
                format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n"),
                id(Some(UID), Some(Runtime::Containerd)),
            ),
            (
                format!("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n"),
                id(Some(UID), Some(Runtime::Containerd)),
            ),
            (
                format!("0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n"),
                id(Some(UID), Some(Runtime::Containerd)),
            ),
            // containerd on cgroup v1 with its systemd cgroup form.
            (
                format!("11:memory:/system.slice/containerd.service/kubepods-besteffort-pod{UID_}.slice:cri-containerd:{CID}\n"),
                id(Some(UID), Some(Runtime::Containerd)),
            ),
            // CRI-O.
            (
                format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/crio-{CID}.scope\n"),
                id(Some(UID), Some(Runtime::CriO)),
            ),
            // cri-dockerd.
            (
                format!("0::/kubepods.slice/kubepods-pod{UID_}.slice/docker-{CID}.scope\n"),
                id(Some(UID), Some(Runtime::Docker)),
            ),
            // kubelet's cgroupfs driver: the runtime is not in the path.
            (format!("0::/kubepods/burstable/pod{UID}/{CID}\n"), id(Some(UID), None)),
            (format!("0::/kubepods/pod{UID}/{CID}\n"), id(Some(UID), None)),
            // docker outside Kubernetes: systemd and cgroupfs drivers.
            (format!("0::/system.slice/docker-{CID}.scope\n"), id(None, Some(Runtime::Docker))),
            (format!("12:pids:/docker/{CID}\n"), id(None, Some(Runtime::Docker))),
            // podman: systemd, cgroupfs (this host), rootless, inside a pod, its own subgroup.
            (format!("0::/machine.slice/libpod-{CID}.scope\n"), id(None, Some(Runtime::Podman))),
            (format!("0::/libpod_parent/libpod-{CID}\n"), id(None, Some(Runtime::Podman))),
            (
                format!("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope\n"),
                id(None, Some(Runtime::Podman)),
            ),
            (
                format!("0::/machine.slice/machine-libpod_pod_0123.slice/libpod-payload-{CID}\n"),
                id(None, Some(Runtime::Podman)),
            ),
            (format!("0::/machine.slice/libpod-{CID}.scope/container\n"), id(None, Some(Runtime::Podman))),
            // Outside the reader's cgroup namespace.
            (
                format!("0::/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n"),
                id(Some(UID), Some(Runtime::Containerd)),
            ),
            // Upper-case hex is the same id.
            (format!("0::/system.slice/docker-{}.scope\n", CID.to_ascii_uppercase()), id(None, Some(Runtime::Docker))),
        ];
        for (text, want) in table {
            assert_eq!(&parse(text), want, "{text}");
        }
    }

    #[test]
    fn the_innermost_container_wins() {
        let outer = "0".repeat(64);
        let text = format!("0::/docker/{outer}/docker/{CID}\n");
        assert_eq!(parse(&text), id(None, Some(Runtime::Docker)));
    }

    #[test]
    fn cgroupfs_driver_v1_lines() {
        let text = format!(
            "12:memory:/kubepods/besteffort/pod0f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8/{CID}\n11:cpu,cpuacct:/kubepods/besteffort/pod0f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8/{CID}\n"
        );
        let id = parse(&text);
        assert_eq!(id.pod_uid.as_deref(), Some("0f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8"));
        assert_eq!(id.container_id.as_deref(), Some(CID));
    }

    #[test]
    fn a_runtime_monitor_is_not_the_container() {
        for text in [
            format!("0::/machine.slice/libpod-conmon-{CID}.scope\n"),
            format!("0::/system.slice/crio-conmon-{CID}.scope\n"),
        ] {
            assert_eq!(parse(&text).container_id, None, "{text}");
        }
        // The pod is still the pod.
        let text = format!("0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{CID}.scope\n");
        assert_eq!(parse(&text), CgroupIdentity { pod_uid: Some(UID.into()), ..Default::default() });
    }

    #[test]
    fn a_plain_session_has_neither() {
        assert_eq!(parse("0::/user.slice/user-0.slice/session-3.scope\n"), CgroupIdentity::default());
        assert_eq!(parse("0::/\n"), CgroupIdentity::default());
        assert_eq!(parse(""), CgroupIdentity::default());
        // A slice named like a pod but without a uid is not a pod.
        assert_eq!(parse("0::/system.slice/podman.slice\n"), CgroupIdentity::default());
        // A word ending in `pod` before a uid is not a pod slice.
        assert_eq!(parse(&format!("0::/ipod{UID}\n")), CgroupIdentity::default());
        // Ids of another length, or not hex, are not container ids.
        assert_eq!(parse(&format!("0::/docker-{}.scope\n", &CID[..63])), CgroupIdentity::default());
        assert_eq!(parse(&format!("0::/libpod-{}z.scope\n", &CID[..63])), CgroupIdentity::default());
        // Lines that are not cgroup lines.
        assert_eq!(parse("garbage\n\0\0\n::\n"), CgroupIdentity::default());
    }

    #[test]
    fn unified_path_is_the_v2_line() {
        let text = "12:memory:/kubepods/x\n0::/kubepods.slice/a.scope\n";
        assert_eq!(unified_path(text).as_deref(), Some("/kubepods.slice/a.scope"));
        assert_eq!(unified_path("4:memory:/docker/abc\n"), None);
        assert_eq!(unified_path("0::/../../kubepods.slice/a.scope\n"), None);
        assert_eq!(unified_path("0::garbage"), None);
        assert_eq!(unified_path("0::/\n").as_deref(), Some("/"));
    }
}
