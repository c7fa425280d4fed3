//! Kubernetes pod and container identity from a `/proc/PID/cgroup` text: the value the
//! collector reads for each process and the exporter for itself, and its pure parser.
//!
//! The shapes kubelet and the runtimes use:
//! - systemd driver: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope`
//! - cgroupfs driver: `/kubepods/burstable/pod<uid>/<id>`
//! - docker / podman / cri-o outside Kubernetes: `/system.slice/docker-<id>.scope`, `/docker/<id>`,
//!   `crio-<id>.scope`, `libpod-<id>.scope`.

/// What the cgroup path says about the workload's pod and container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupIdentity {
    /// `k8s.pod.uid`, with dashes.
    pub pod_uid: Option<String>,
    /// `container.id`: 64 hex characters.
    pub container_id: Option<String>,
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn pod_uid(segment: &str) -> Option<String> {
    // `kubepods-burstable-pod<uid>.slice` or `pod<uid>`.
    let s = segment.strip_suffix(".slice").unwrap_or(segment);
    let at = s.rfind("pod")?;
    let uid = s[at + 3..].replace('_', "-");
    let ok = uid.len() == 36
        && uid
            .bytes()
            .enumerate()
            .all(|(i, b)| if [8, 13, 18, 23].contains(&i) { b == b'-' } else { b.is_ascii_hexdigit() });
    ok.then_some(uid)
}

fn container_id(segment: &str) -> Option<String> {
    let s = segment.strip_suffix(".scope").unwrap_or(segment);
    let id = s.rsplit(['-', ':']).next().unwrap_or(s);
    is_container_id(id).then(|| id.to_ascii_lowercase())
}

/// Parses the cgroup file: the v2 line (`0::/path`) or any v1 line, whichever names a pod or
/// container first.
pub fn parse(text: &str) -> CgroupIdentity {
    let mut id = CgroupIdentity::default();
    for line in text.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else { continue };
        for seg in path.split('/').filter(|s| !s.is_empty()) {
            if id.pod_uid.is_none() {
                id.pod_uid = pod_uid(seg);
            }
            if let Some(c) = container_id(seg) {
                id.container_id = Some(c);
            }
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

    #[test]
    fn systemd_driver_kubernetes() {
        let text = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8a1d2c3e_4f5a_6b7c_8d9e_0f1a2b3c4d5e.slice/cri-containerd-{CID}.scope\n"
        );
        let id = parse(&text);
        assert_eq!(id.pod_uid.as_deref(), Some("8a1d2c3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e"));
        assert_eq!(id.container_id.as_deref(), Some(CID));
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
    fn docker_without_kubernetes() {
        let id = parse(&format!("0::/system.slice/docker-{CID}.scope\n"));
        assert_eq!(id, CgroupIdentity { pod_uid: None, container_id: Some(CID.into()) });
    }

    #[test]
    fn a_plain_session_has_neither() {
        assert_eq!(parse("0::/user.slice/user-0.slice/session-3.scope\n"), CgroupIdentity::default());
        assert_eq!(parse("0::/\n"), CgroupIdentity::default());
        assert_eq!(parse(""), CgroupIdentity::default());
        // A slice named like a pod but without a uid is not a pod.
        assert_eq!(parse("0::/system.slice/podman.slice\n"), CgroupIdentity::default());
    }
}
