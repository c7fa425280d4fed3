//! Reads the evidence of a process's container and pod (`model/container.rs` chooses from it):
//! its cgroup path; the runtime's own state on the node, once per container; and, for a
//! process of a pod with a UTS namespace of its own, its `/etc/hostname`, `HOSTNAME` and the
//! service account's namespace file, through its own root. Every read is bounded and every
//! file of a container is opened inside its root (`root_file`).
use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use super::root_file;
use crate::model::{
    cgroup,
    container::{self, ContainerIdentity, Evidence, Runtime, RuntimeNames},
};

/// `/proc/PID/cgroup` is a few lines; hundreds of v1 hierarchies would still fit.
const CGROUP_MAX: usize = 64 * 1024;
/// A hostname (64) or a namespace (63) with its newline, and some slack.
const NAME_FILE_MAX: usize = 512;
/// An OCI bundle's config.json (its environment and mounts: tens of KiB).
const BUNDLE_MAX: usize = 1 << 20;
/// podman's containers.json lists every container of the store (about 500 bytes each).
const STORE_MAX: usize = 16 << 20;
/// Containers whose runtime names are remembered; the map is emptied when it is full.
const CACHE_MAX: usize = 4096;

const SERVICE_ACCOUNT_NAMESPACE: &str = "var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Where each runtime keeps what names a container, relative to the host's root.
fn runtime_state_paths(runtime: Option<Runtime>, id: &str) -> Vec<(String, StateKind)> {
    let containerd =
        (format!("run/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json"), StateKind::Bundle);
    let crio = (format!("run/containers/storage/overlay-containers/{id}/userdata/config.json"), StateKind::Bundle);
    match runtime {
        Some(Runtime::Containerd) => vec![containerd],
        Some(Runtime::CriO) => vec![crio],
        Some(Runtime::Podman) => {
            vec![("var/lib/containers/storage/overlay-containers/containers.json".into(), StateKind::PodmanStore)]
        }
        Some(Runtime::Docker) => {
            vec![(format!("var/lib/docker/containers/{id}/config.v2.json"), StateKind::DockerConfig)]
        }
        // kubelet's cgroupfs driver does not say which CRI runtime it is.
        None => vec![containerd, crio],
    }
}

#[derive(Clone, Copy)]
enum StateKind {
    Bundle,
    PodmanStore,
    DockerConfig,
}

/// What the reader counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdentityCounts {
    /// Processes whose cgroup named a container or pod.
    pub in_containers: u64,
    /// Files of a container or runtime that could not be read (missing, not regular, too big,
    /// no access): the field they would have named stays unknown or comes from the next source.
    pub unreadable: u64,
}

/// Reads identities; remembers each container's runtime names.
pub struct IdentityReader {
    /// The host's root: `/proc/1/root` (right for an agent in a `hostPID` pod too), or `/`
    /// where pid 1 cannot be inspected.
    host_root: PathBuf,
    /// The host's UTS namespace (pid 1's, else the agent's own).
    host_uts: Option<u64>,
    cache: HashMap<String, RuntimeNames>,
    pub counts: IdentityCounts,
}

fn ns_inode(path: &str) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

impl Default for IdentityReader {
    fn default() -> Self {
        Self::new()
    }
}

impl IdentityReader {
    pub fn new() -> Self {
        let pid1_root = Path::new("/proc/1/root");
        let host_root = if std::fs::read_dir(pid1_root).is_ok() { pid1_root.to_path_buf() } else { PathBuf::from("/") };
        let host_uts = ns_inode("/proc/1/ns/uts").or_else(|| ns_inode("/proc/self/ns/uts"));
        IdentityReader { host_root, host_uts, cache: HashMap::new(), counts: IdentityCounts::default() }
    }

    fn read(&mut self, root: &Path, path: &str, max: usize) -> Option<Vec<u8>> {
        match root_file::read(root, path, max) {
            Ok(b) => Some(b),
            Err(e) => {
                self.counts.unreadable += 1;
                tracing::debug!("container identity: {e}");
                None
            }
        }
    }

    fn runtime_names(&mut self, c: &cgroup::CgroupIdentity) -> RuntimeNames {
        let Some(id) = &c.container_id else { return RuntimeNames::default() };
        if let Some(n) = self.cache.get(id) {
            return n.clone();
        }
        let mut names = RuntimeNames::default();
        let root = self.host_root.clone();
        for (path, kind) in runtime_state_paths(c.runtime, id) {
            let max = if matches!(kind, StateKind::PodmanStore) { STORE_MAX } else { BUNDLE_MAX };
            // A missing bundle of the other CRI runtime is not a failure.
            let Ok(bytes) = root_file::read(&root, &path, max).map_err(|e| {
                if c.runtime.is_some() {
                    self.counts.unreadable += 1;
                    tracing::debug!("container identity: {e}");
                }
            }) else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
            names = match kind {
                StateKind::Bundle => container::oci_annotations(&text),
                StateKind::PodmanStore => {
                    RuntimeNames { name: container::podman_name(&text, id), ..Default::default() }
                }
                StateKind::DockerConfig => RuntimeNames { name: container::docker_name(&text), ..Default::default() },
            };
            break;
        }
        if self.cache.len() >= CACHE_MAX {
            self.cache.clear();
        }
        self.cache.insert(id.clone(), names.clone());
        names
    }

    /// The identity of `tgid`; `environ` is its environment as already read (for `HOSTNAME`).
    pub fn identify(&mut self, tgid: u32, environ: &[(String, String)]) -> ContainerIdentity {
        let proc_dir = PathBuf::from(format!("/proc/{tgid}"));
        let Some(text) = root_file::read(&proc_dir, "cgroup", CGROUP_MAX).ok() else { return Default::default() };
        let text = String::from_utf8_lossy(&text);
        let cg = cgroup::parse(&text);
        if cg.pod_uid.is_none() && cg.container_id.is_none() {
            return ContainerIdentity::default();
        }
        self.counts.in_containers += 1;
        let runtime_names = self.runtime_names(&cg);
        let mut hostname_file = None;
        let mut namespace_file = None;
        let mut environ_hostname = None;
        if cg.pod_uid.is_some() {
            // The pod's hostname is its own UTS namespace's; a process in the host's has none.
            let own_uts = ns_inode(&format!("/proc/{tgid}/ns/uts"));
            if own_uts.is_some() && own_uts != self.host_uts {
                let root = proc_dir.join("root");
                hostname_file = self.read(&root, "etc/hostname", NAME_FILE_MAX);
                environ_hostname = environ.iter().find(|(k, _)| k == "HOSTNAME").map(|(_, v)| v.as_str());
            }
            namespace_file = root_file::read(&proc_dir.join("root"), SERVICE_ACCOUNT_NAMESPACE, NAME_FILE_MAX).ok();
        }
        let mut id = container::resolve(&Evidence {
            cgroup: cg,
            runtime_names,
            hostname_file: hostname_file.as_deref(),
            environ_hostname,
            service_account_namespace: namespace_file.as_deref(),
        });
        id.cgroup_path = cgroup::unified_path(&text);
        id
    }
}
