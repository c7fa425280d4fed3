use super::*;
use crate::model::cgroup;

const CID: &str = "a18263a04de5ed0f5b8428dfd2e2f5cb1a9334d4786017922c8aae2e675a0acf";
const UID: &str = "8a1d2c3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e";

fn pod_cgroup() -> CgroupIdentity {
    cgroup::parse(&format!(
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CID}.scope\n",
        UID.replace('-', "_")
    ))
}

#[test]
fn names_are_kept_only_when_they_look_like_names() {
    assert_eq!(clean_name(b"trainer-0\n", MAX_NAME).as_deref(), Some("trainer-0"));
    assert_eq!(clean_name(b"  ns.a_b-1  ", MAX_NAME).as_deref(), Some("ns.a_b-1"));
    // Only the first line counts (a hostname file has one).
    assert_eq!(clean_name(b"pod-a\nsecond line\n", MAX_NAME).as_deref(), Some("pod-a"));
    for bad in
        [&b""[..], b"\n", b"   ", b"a b", b"pod\x1b[31m", b"pod\0x", b"\"quoted\"", b"caf\xc3\xa9", b"a/b", b"\xff\xfe"]
    {
        assert_eq!(clean_name(bad, MAX_NAME), None, "{bad:?}");
    }
    let long = "a".repeat(MAX_NAME + 1);
    assert_eq!(clean_name(long.as_bytes(), MAX_NAME), None);
    assert_eq!(clean_name(&long.as_bytes()[..MAX_NAME], MAX_NAME).map(|s| s.len()), Some(MAX_NAME));
    assert_eq!(clean_name(b"abcd", 3), None);
}

/// containerd's CRI plugin: a container and its pod's sandbox (annotation keys of
/// containerd 1.7 `pkg/cri/annotations`).
#[test]
fn containerd_annotations_name_pod_namespace_and_container() {
    let json = format!(
        r#"{{"ociVersion":"1.1.0","process":{{"args":["python"]}},"annotations":{{
        "io.kubernetes.cri.container-type":"container",
        "io.kubernetes.cri.container-name":"trainer",
        "io.kubernetes.cri.sandbox-id":"{CID}",
        "io.kubernetes.cri.sandbox-name":"llama-train-0",
        "io.kubernetes.cri.sandbox-namespace":"ml",
        "io.kubernetes.cri.sandbox-uid":"{UID}",
        "io.kubernetes.cri.image-name":"registry/train:1"}}}}"#
    );
    let n = oci_annotations(&json);
    assert_eq!(
        n,
        RuntimeNames {
            pod_uid: Some(UID.into()),
            pod_name: Some("llama-train-0".into()),
            pod_namespace: Some("ml".into()),
            name: Some("trainer".into()),
        }
    );
    let sandbox = r#"{"annotations":{"io.kubernetes.cri.container-type":"sandbox","io.kubernetes.cri.sandbox-name":"p","io.kubernetes.cri.sandbox-namespace":"default"}}"#;
    let n = oci_annotations(sandbox);
    assert_eq!((n.pod_name.as_deref(), n.name), (Some("p"), None));
}

/// CRI-O: direct annotations, and the kubelet's labels kept as one JSON string.
#[test]
fn crio_annotations_and_labels() {
    let direct = r#"{"annotations":{"io.kubernetes.pod.name":"web-1","io.kubernetes.pod.namespace":"prod","io.kubernetes.container.name":"app"}}"#;
    let n = oci_annotations(direct);
    assert_eq!(
        (n.pod_name.as_deref(), n.pod_namespace.as_deref(), n.name.as_deref()),
        (Some("web-1"), Some("prod"), Some("app"))
    );
    let labels = r#"{"annotations":{"io.kubernetes.cri-o.Labels":"{\"io.kubernetes.pod.name\":\"web-2\",\"io.kubernetes.pod.namespace\":\"prod\",\"io.kubernetes.container.name\":\"app\"}"}}"#;
    assert_eq!(oci_annotations(labels).pod_name.as_deref(), Some("web-2"));
    // Broken or hostile files name nothing.
    for bad in ["", "{", "[]", r#"{"annotations":5}"#, r#"{"annotations":{"io.kubernetes.pod.name":"a\u001bb"}}"#] {
        assert_eq!(oci_annotations(bad), RuntimeNames::default(), "{bad}");
    }
}

/// podman 4.3's containers.json as captured on this host (trimmed to two entries).
#[test]
fn podman_names_from_its_container_store() {
    let json = format!(
        r#"[{{"id":"545ae57d834976d99ec90bc249929be899c0c906ee96c42859a05dcc5019dd7b","names":["identtest"],"image":"","layer":"68c8","metadata":"{{}}","created":"2026-12-02T03:38:13Z","flags":{{"Volatile":true}}}},
        {{"id":"{CID}","names":["identtest3"],"image":"","layer":"68c8","metadata":"{{\"name\":\"identtest3\"}}","created":"2026-12-02T03:38:41Z","flags":{{"MountLabel":"","Volatile":true}}}}]"#
    );
    assert_eq!(podman_name(&json, CID).as_deref(), Some("identtest3"));
    assert_eq!(podman_name(&json, &CID.to_ascii_uppercase()).as_deref(), Some("identtest3"));
    assert_eq!(podman_name(&json, &"0".repeat(64)), None);
    assert_eq!(podman_name("not json", CID), None);
    let hostile = format!(r#"[{{"id":"{CID}","names":["bad name","good-name"]}}]"#);
    assert_eq!(podman_name(&hostile, CID).as_deref(), Some("good-name"));
}

#[test]
fn docker_names_from_config_v2() {
    assert_eq!(docker_name(r#"{"ID":"x","Name":"/train","State":{}}"#).as_deref(), Some("train"));
    assert_eq!(docker_name(r#"{"Name":"/"}"#), None);
    assert_eq!(docker_name("{}"), None);
}

#[test]
fn a_host_process_has_no_identity_whatever_else_is_found() {
    let e = Evidence {
        cgroup: cgroup::parse("0::/user.slice/user-0.slice/session-3.scope\n"),
        runtime_names: RuntimeNames { name: Some("x".into()), ..Default::default() },
        hostname_file: Some(b"node-1\n"),
        environ_hostname: Some("node-1"),
        service_account_namespace: Some(b"default"),
    };
    let id = resolve(&e);
    assert_eq!(id, ContainerIdentity::default());
    assert!(id.is_host());
    assert_eq!(id.label(), None);
}

#[test]
fn runtime_state_wins_over_what_the_container_shows() {
    let e = Evidence {
        cgroup: pod_cgroup(),
        runtime_names: RuntimeNames {
            pod_uid: Some(UID.to_ascii_uppercase()),
            pod_name: Some("llama-train-0".into()),
            pod_namespace: Some("ml".into()),
            name: Some("trainer".into()),
        },
        hostname_file: Some(b"custom-hostname\n"),
        environ_hostname: Some("custom-hostname"),
        service_account_namespace: Some(b"other"),
    };
    let id = resolve(&e);
    assert_eq!(id.id.as_deref(), Some(CID));
    assert_eq!(id.runtime, Some(Runtime::Containerd));
    assert_eq!(id.pod_uid.as_deref(), Some(UID));
    assert_eq!(id.pod_name.as_deref(), Some("llama-train-0"));
    assert_eq!(id.pod_namespace.as_deref(), Some("ml"));
    assert_eq!(id.name.as_deref(), Some("trainer"));
    assert_eq!(
        id.sources,
        Sources {
            pod_name: Some(Source::RuntimeState),
            pod_namespace: Some(Source::RuntimeState),
            name: Some(Source::RuntimeState)
        }
    );
    assert_eq!(id.label().as_deref(), Some("llama-train-0"));
}

#[test]
fn without_runtime_state_a_pod_is_named_by_its_hostname_then_its_environment() {
    let mut e = Evidence {
        cgroup: pod_cgroup(),
        hostname_file: Some(b"llama-train-0\n"),
        environ_hostname: Some("from-env"),
        service_account_namespace: Some(b"ml\n"),
        ..Default::default()
    };
    let id = resolve(&e);
    assert_eq!((id.pod_name.as_deref(), id.sources.pod_name), (Some("llama-train-0"), Some(Source::HostnameFile)));
    assert_eq!((id.pod_namespace.as_deref(), id.sources.pod_namespace), (Some("ml"), Some(Source::ServiceAccount)));
    assert_eq!((id.name.as_deref(), id.sources.name), (None, None));
    // An unreadable or odd hostname file: the environment's HOSTNAME.
    e.hostname_file = Some(b"\x1b]0;pwned\x07");
    let id = resolve(&e);
    assert_eq!((id.pod_name.as_deref(), id.sources.pod_name), (Some("from-env"), Some(Source::EnvironHostname)));
    e.hostname_file = None;
    e.environ_hostname = Some("");
    assert_eq!(resolve(&e).pod_name, None);
    // A namespace is a DNS label (63 at most).
    e.service_account_namespace = Some("n".repeat(64).into_bytes().leak());
    assert_eq!(resolve(&e).pod_namespace, None);
}

#[test]
fn runtime_state_of_another_pod_is_ignored() {
    let e = Evidence {
        cgroup: pod_cgroup(),
        runtime_names: RuntimeNames {
            pod_uid: Some("00000000-0000-0000-0000-000000000000".into()),
            pod_name: Some("someone-else".into()),
            name: Some("other".into()),
            ..Default::default()
        },
        hostname_file: Some(b"mine"),
        ..Default::default()
    };
    let id = resolve(&e);
    assert_eq!((id.pod_name.as_deref(), id.name), (Some("mine"), None));
}

#[test]
fn a_podman_container_has_a_name_from_its_store_and_no_pod() {
    let e = Evidence {
        cgroup: cgroup::parse(&format!("0::/libpod_parent/libpod-{CID}\n")),
        runtime_names: RuntimeNames { name: Some("identtest3".into()), ..Default::default() },
        // podman's hostname: the id's first 12 characters; never a pod name.
        hostname_file: Some(b"a18263a04de5"),
        environ_hostname: Some("a18263a04de5"),
        service_account_namespace: None,
    };
    let id = resolve(&e);
    assert_eq!(id.runtime, Some(Runtime::Podman));
    assert_eq!(id.runtime.map(Runtime::as_str), Some("podman"));
    assert_eq!((id.pod_uid.as_deref(), id.pod_name.as_deref()), (None, None));
    assert_eq!((id.name.as_deref(), id.sources.name), (Some("identtest3"), Some(Source::RuntimeState)));
    assert_eq!(id.label().as_deref(), Some("identtest3"));
    let unnamed = resolve(&Evidence { runtime_names: RuntimeNames::default(), ..e });
    assert_eq!(unnamed.label().as_deref(), Some("a18263a04de5"));
}

#[test]
fn a_filter_matches_pod_namespace_container_and_id() {
    let id = ContainerIdentity {
        id: Some(CID.into()),
        pod_name: Some("Llama-Train-0".into()),
        pod_namespace: Some("ml".into()),
        name: Some("trainer".into()),
        ..Default::default()
    };
    for n in ["llama", "train-0", "ml", "trainer", "a18263"] {
        assert!(id.matches(n), "{n}");
    }
    assert!(!id.matches("bert"));
    assert!(!ContainerIdentity::default().matches(""));
}

#[test]
fn the_json_form_has_every_field_and_null_when_unknown() {
    let id = resolve(&Evidence { cgroup: pod_cgroup(), hostname_file: Some(b"p0"), ..Default::default() });
    let v = serde_json::to_value(&id).unwrap();
    assert_eq!(v["id"], CID);
    assert_eq!(v["runtime"], "containerd");
    assert_eq!(v["pod_uid"], UID);
    assert_eq!(v["pod_name"], "p0");
    assert!(v["pod_namespace"].is_null() && v["name"].is_null());
    assert_eq!(v["sources"], serde_json::json!({"pod_name": "hostname_file"}));
    let back: ContainerIdentity = serde_json::from_value(v).unwrap();
    assert_eq!(back, id);
    assert_eq!(serde_json::to_value(Runtime::CriO).unwrap(), "cri-o");
}
