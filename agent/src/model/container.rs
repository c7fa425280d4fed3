//! Who a process is to its container runtime and to Kubernetes: container id and runtime, pod
//! uid, pod name and namespace, container name; each field with the source it came from.
//!
//! Pure: the collector (`collect/container.rs`) reads the evidence, bounded, and passes it in;
//! every name that comes from another process or a runtime's file is untrusted and kept only
//! when it looks like a name ([`clean_name`]). Which source wins, and why, is in
//! docs/containers.md:
//! - id, runtime, pod uid: the cgroup path (`model/cgroup.rs`), written by the runtime and
//!   kubelet, not by the container.
//! - pod name, pod namespace, container name: the runtime's own state on the node first (the
//!   OCI bundle's annotations of containerd and CRI-O, podman's `containers.json`, docker's
//!   `config.v2.json`): written by the runtime, out of the container's reach. Without it, for
//!   a process of a pod: the pod name is the pod's hostname (the container's `/etc/hostname`,
//!   then `HOSTNAME` in its environment: kubelet sets the hostname to the pod's name unless the
//!   spec sets `hostname`, truncated to 63 characters), and the namespace is the service
//!   account's `namespace` file in the container's root.
//! - A podman or docker container's hostname is not its name (podman 4 and docker default it to
//!   the id's first 12 characters even with `--name`), so the name comes from runtime state
//!   only.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cgroup::CgroupIdentity;
pub use super::cgroup::Runtime;

/// The longest name kept (a Kubernetes object name is a DNS subdomain: 253).
pub const MAX_NAME: usize = 253;

/// Where a name came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The runtime's files on the node (OCI annotations, podman's or docker's container store).
    RuntimeState,
    /// `/etc/hostname` inside the process's root.
    HostnameFile,
    /// `HOSTNAME` in `/proc/PID/environ`.
    EnvironHostname,
    /// `/var/run/secrets/kubernetes.io/serviceaccount/namespace` inside the process's root.
    ServiceAccount,
}

/// The sources of the names (id, runtime and pod uid always come from the cgroup path).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<Source>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_namespace: Option<Source>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Source>,
}

/// A process's container and pod; every field `None` for a process of the host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerIdentity {
    /// `container.id`.
    pub id: Option<String>,
    /// `container.runtime`.
    pub runtime: Option<Runtime>,
    /// `k8s.pod.uid`.
    pub pod_uid: Option<String>,
    /// `k8s.pod.name`.
    pub pod_name: Option<String>,
    /// `k8s.namespace.name`.
    pub pod_namespace: Option<String>,
    /// `container.name`.
    pub name: Option<String>,
    #[serde(default)]
    pub sources: Sources,
    /// The cgroup v2 path (`/proc/PID/cgroup`'s `0::` line), where its tiering counters are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_path: Option<String>,
}

impl ContainerIdentity {
    /// Neither in a container nor in a pod.
    pub fn is_host(&self) -> bool {
        self.id.is_none() && self.pod_uid.is_none()
    }

    /// The short form shown in a column: the pod's name, else the container's name, else the
    /// id's first 12 characters (what `podman ps` and `docker ps` show).
    pub fn label(&self) -> Option<String> {
        self.pod_name
            .clone()
            .or_else(|| self.name.clone())
            .or_else(|| self.id.as_ref().map(|i| i[..i.len().min(12)].to_string()))
    }

    /// Whether a filter's text (lower case) names this process's pod, namespace, container or
    /// id.
    pub fn matches(&self, needle_lower: &str) -> bool {
        [&self.pod_name, &self.pod_namespace, &self.name, &self.id, &self.pod_uid]
            .into_iter()
            .flatten()
            .any(|v| v.to_ascii_lowercase().contains(needle_lower))
    }
}

/// A name from untrusted bytes: the first line, trimmed, kept only when it is 1 to `max`
/// characters of `[A-Za-z0-9._-]` (what Kubernetes object names, container names and host
/// names are made of). Anything else (control characters, spaces, quotes, other scripts) is
/// not a name and gives `None`, so it never reaches a terminal or a label.
pub fn clean_name(raw: &[u8], max: usize) -> Option<String> {
    let line = raw.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.trim_ascii();
    let ok = !line.is_empty()
        && line.len() <= max
        && line.iter().all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    ok.then(|| String::from_utf8_lossy(line).into_owned())
}

/// Names the runtime's own state gives for a container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeNames {
    pub pod_uid: Option<String>,
    pub pod_name: Option<String>,
    pub pod_namespace: Option<String>,
    pub name: Option<String>,
}

/// Annotation keys: (pod uid, pod name, pod namespace, container name). containerd's CRI
/// plugin writes the first set into the OCI bundle's `config.json`; CRI-O the second.
const ANNOTATION_KEYS: &[[&str; 4]] = &[
    [
        "io.kubernetes.cri.sandbox-uid",
        "io.kubernetes.cri.sandbox-name",
        "io.kubernetes.cri.sandbox-namespace",
        "io.kubernetes.cri.container-name",
    ],
    ["io.kubernetes.pod.uid", "io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.container.name"],
];

/// The names in an OCI bundle's `config.json` (containerd, CRI-O). A pod's sandbox (pause)
/// container has pod names and no container name.
pub fn oci_annotations(json: &str) -> RuntimeNames {
    #[derive(Deserialize)]
    struct Spec {
        #[serde(default)]
        annotations: BTreeMap<String, String>,
    }
    let Ok(spec) = serde_json::from_str::<Spec>(json) else { return RuntimeNames::default() };
    let mut a = spec.annotations;
    // CRI-O also keeps the kubelet's labels as one JSON string.
    if let Some(labels) =
        a.get("io.kubernetes.cri-o.Labels").and_then(|l| serde_json::from_str::<BTreeMap<String, String>>(l).ok())
    {
        for (k, v) in labels {
            a.entry(k).or_insert(v);
        }
    }
    let get = |k: &str| a.get(k).and_then(|v| clean_name(v.as_bytes(), MAX_NAME));
    let mut n = RuntimeNames::default();
    for [uid, pod, ns, name] in ANNOTATION_KEYS {
        n.pod_uid = n.pod_uid.or_else(|| get(uid));
        n.pod_name = n.pod_name.or_else(|| get(pod));
        n.pod_namespace = n.pod_namespace.or_else(|| get(ns));
        n.name = n.name.or_else(|| get(name));
    }
    n
}

/// A podman container's name from containers/storage's `containers.json` (an array of
/// `{"id": ..., "names": [...]}`).
pub fn podman_name(json: &str, id: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Entry {
        id: String,
        #[serde(default)]
        names: Vec<String>,
    }
    let entries: Vec<Entry> = serde_json::from_str(json).ok()?;
    let e = entries.into_iter().find(|e| e.id.eq_ignore_ascii_case(id))?;
    e.names.iter().find_map(|n| clean_name(n.as_bytes(), MAX_NAME))
}

/// A docker container's name from its `config.v2.json` (`"Name": "/train"`).
pub fn docker_name(json: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Config {
        #[serde(rename = "Name")]
        name: String,
    }
    let c: Config = serde_json::from_str(json).ok()?;
    clean_name(c.name.trim_start_matches('/').as_bytes(), MAX_NAME)
}

/// What the collector found for one process.
#[derive(Clone, Debug, Default)]
pub struct Evidence<'a> {
    pub cgroup: CgroupIdentity,
    /// From the runtime's files, when the runtime's state was readable.
    pub runtime_names: RuntimeNames,
    /// `/etc/hostname` in its root, read only when it has a UTS namespace of its own.
    pub hostname_file: Option<&'a [u8]>,
    /// `HOSTNAME` from its environment, read only when it has a UTS namespace of its own.
    pub environ_hostname: Option<&'a str>,
    /// The service account's `namespace` file in its root.
    pub service_account_namespace: Option<&'a [u8]>,
}

/// Chooses each field from the evidence, most reliable source first (module docs).
pub fn resolve(e: &Evidence<'_>) -> ContainerIdentity {
    let c = &e.cgroup;
    let mut id = ContainerIdentity {
        id: c.container_id.clone(),
        runtime: c.runtime,
        pod_uid: c.pod_uid.clone(),
        ..Default::default()
    };
    if id.is_host() {
        return id;
    }
    // Runtime state for another pod (a stale bundle, an id reused) names nothing here.
    let r = &e.runtime_names;
    let agrees = match (&r.pod_uid, &c.pod_uid) {
        (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
        (Some(_), None) => false,
        (None, _) => true,
    };
    if agrees {
        if c.pod_uid.is_some() {
            set(&mut id.pod_name, &mut id.sources.pod_name, r.pod_name.clone(), Source::RuntimeState);
            set(&mut id.pod_namespace, &mut id.sources.pod_namespace, r.pod_namespace.clone(), Source::RuntimeState);
        }
        set(&mut id.name, &mut id.sources.name, r.name.clone(), Source::RuntimeState);
    }
    if c.pod_uid.is_some() {
        let from_file = e.hostname_file.and_then(|b| clean_name(b, MAX_NAME));
        set(&mut id.pod_name, &mut id.sources.pod_name, from_file, Source::HostnameFile);
        let from_env = e.environ_hostname.and_then(|h| clean_name(h.as_bytes(), MAX_NAME));
        set(&mut id.pod_name, &mut id.sources.pod_name, from_env, Source::EnvironHostname);
        // A namespace is a DNS label: 63 at most.
        let ns = e.service_account_namespace.and_then(|b| clean_name(b, 63));
        set(&mut id.pod_namespace, &mut id.sources.pod_namespace, ns, Source::ServiceAccount);
    }
    id
}

fn set(field: &mut Option<String>, source: &mut Option<Source>, value: Option<String>, from: Source) {
    if field.is_none() {
        if let Some(v) = value {
            *field = Some(v);
            *source = Some(from);
        }
    }
}

#[cfg(test)]
mod tests;
