//! The deployment files in deploy/: every Kustomize variant renders and validates against the
//! Kubernetes API schemas offline (PyPI's kubernetes-validate, strict), the DaemonSet keeps the
//! agent least-privileged and reachable by Prometheus only (a NetworkPolicy), and the arguments
//! and config file the manifests, the image and the systemd unit give the agent are ones it
//! accepts (`run --check-config`); the unit passes
//! `systemd-analyze verify` and, run with its own credentials, collects; the image runs `check`
//! with only the four capabilities. `cargo xtask setup` installs the tools, `cargo xtask image`
//! builds the image (`cargo xtask test` does both and sets TIERSCOPE_IMAGE).
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use tierscope_tests::{require_root_and_agent, tierscope_bin};

/// The capabilities `tierscope run` needs (docs/security.md, "What the agent needs and guarantees").
const CAPABILITIES: [&str; 4] = ["BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn kubernetes() -> PathBuf {
    root().join("deploy/kubernetes")
}

fn venv_bin(tool: &str) -> PathBuf {
    let p = root().join("target/test-readers/venv/bin").join(tool);
    assert!(p.is_file(), "{} is missing: `cargo xtask setup` installs it", p.display());
    p
}

/// Runs `cmd`; panics with what it said unless it succeeds. Returns stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?} failed ({}): {said}{}", out.status, String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every variant: the base and each overlay.
fn variants() -> Vec<PathBuf> {
    let mut v = vec![kubernetes().join("base")];
    let overlays = kubernetes().join("overlays");
    let mut o: Vec<PathBuf> = std::fs::read_dir(&overlays)
        .expect("test files")
        .map(|e| e.expect("test files").path())
        .filter(|p| p.is_dir())
        .collect();
    o.sort();
    assert!(o.len() >= 2, "expected the prometheus and otlp overlays in {}", overlays.display());
    v.extend(o);
    v
}

/// `kubectl kustomize DIR` (kubectl's built-in kustomize; no cluster needed).
fn render(dir: &Path) -> String {
    run(Command::new("kubectl").arg("kustomize").arg(dir))
}

/// YAML documents as JSON values (PyYAML from the validator's environment).
fn documents(yaml: &str) -> Vec<Value> {
    let mut child = Command::new(venv_bin("python"))
        .args(["-c", "import sys, yaml, json; json.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("present in the manifest");
    use std::io::Write as _;
    child.stdin.take().expect("child process").write_all(yaml.as_bytes()).expect("child process");
    let out = child.wait_with_output().expect("child process");
    assert!(out.status.success(), "YAML did not parse");
    serde_json::from_slice::<Vec<Value>>(&out.stdout).expect("child process")
}

/// `kubernetes-validate --strict` on a file: (passed, what it said).
fn validate(file: &Path) -> (bool, String) {
    let out = Command::new(venv_bin("kubernetes-validate")).arg("--strict").arg(file).output().expect("child process");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tierscope-deploy-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("test files");
    d
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// Issue 41: one NetworkPolicy selects the agent's pods and admits, on the metrics port only,
/// Prometheus pods only (a selector on each peer: no empty `from`, no address block).
fn only_the_scrapers_reach_the_endpoint(name: &str, docs: &[Value], template: &Value) {
    let policies = of_kind(docs, "NetworkPolicy");
    assert_eq!(policies.len(), 1, "{name}: one NetworkPolicy for the agent's endpoint");
    let spec = &policies[0]["spec"];
    let selected = spec["podSelector"]["matchLabels"].as_object().expect("the policy selects pods by label");
    assert!(!selected.is_empty(), "{name}: the policy selects every pod of the namespace");
    for (k, v) in selected {
        assert_eq!(&template["metadata"]["labels"][k], v, "{name}: the policy does not select the agent's pods ({k})");
    }
    assert_eq!(strings(&spec["policyTypes"]), ["Ingress"], "{name}");
    let rules = spec["ingress"].as_array().expect("ingress rules");
    assert_eq!(rules.len(), 1, "{name}: one ingress rule");
    let ports = rules[0]["ports"].as_array().expect("the rule names its port");
    let container_port = template["spec"]["containers"][0]["ports"]
        .as_array()
        .expect("present in the manifest")
        .iter()
        .find(|p| p["name"] == "metrics")
        .expect("the metrics port")
        .clone();
    assert_eq!(ports.len(), 1, "{name}: one port admitted");
    assert!(
        ports[0]["port"] == "metrics" || ports[0]["port"] == container_port["containerPort"],
        "{name}: the admitted port is not the metrics port: {}",
        ports[0]
    );
    assert_eq!(ports[0]["protocol"], "TCP", "{name}");
    let from = rules[0]["from"].as_array().expect("the rule says from whom");
    assert!(!from.is_empty(), "{name}: an empty `from` admits everyone");
    for peer in from {
        assert!(peer.get("ipBlock").is_none(), "{name}: an address block admits more than the scrapers: {peer}");
        assert_eq!(
            peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"], "prometheus",
            "{name}: a peer that is not Prometheus: {peer}"
        );
    }
}

#[test]
fn every_kubernetes_variant_renders_and_validates_offline() {
    let dir = tmp("validate");
    for variant in variants() {
        let name = variant.file_name().expect("present in the manifest").to_string_lossy().to_string();
        let yaml = render(&variant);
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, &yaml).expect("test files");
        let (ok, said) = validate(&file);
        let docs = documents(&yaml);
        assert!(ok, "{name}: kubernetes-validate --strict refused it:\n{said}");
        assert_eq!(
            said.matches(" passed for resource ").count(),
            docs.len(),
            "{name}: not every resource passed:\n{said}"
        );
        println!("{name}: {} resources valid", docs.len());

        let ds = of_kind(&docs, "DaemonSet");
        assert_eq!(ds.len(), 1, "{name}: one DaemonSet");
        let pod = &ds[0]["spec"]["template"]["spec"];
        assert_eq!(pod["hostPID"], true, "{name}: host PID namespace");
        assert_eq!(pod["serviceAccountName"], "tierscope");
        assert_eq!(pod["nodeSelector"]["feature.node.kubernetes.io/memory/cxl-enabled"], "true", "{name}: CXL nodes");
        assert!(
            pod["tolerations"].as_array().expect("present in the manifest").iter().any(|t| t["key"] == "cxl.memory"),
            "{name}: cxl.memory taint"
        );
        let c = &pod["containers"][0];
        let sc = &c["securityContext"];
        assert_ne!(sc["privileged"], true, "{name}: privileged");
        assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{name}");
        let added: BTreeSet<String> = strings(&sc["capabilities"]["add"]).into_iter().collect();
        assert_eq!(
            added,
            CAPABILITIES.iter().map(|s| s.to_string()).collect(),
            "{name}: exactly the four capabilities"
        );
        for (k, want) in [("requests", ["cpu", "memory"]), ("limits", ["cpu", "memory"])] {
            for r in want {
                assert!(c["resources"][k][r].is_string(), "{name}: no {k}.{r}");
            }
        }
        let volumes: BTreeMap<String, String> = pod["volumes"]
            .as_array()
            .expect("present in the manifest")
            .iter()
            .filter_map(|v| Some((v["name"].as_str()?.to_string(), v["hostPath"]["path"].as_str()?.to_string())))
            .collect();
        for host in ["/sys", "/sys/kernel/tracing", "/sys/kernel/debug"] {
            assert!(volumes.values().any(|p| p == host), "{name}: no hostPath {host}: {volumes:?}");
        }
        let mounts: Vec<String> = c["volumeMounts"]
            .as_array()
            .expect("present in the manifest")
            .iter()
            .filter_map(|m| m["mountPath"].as_str().map(str::to_string))
            .collect();
        assert!(mounts.contains(&"/etc/tierscope".to_string()), "{name}: the config file's ConfigMap");
        only_the_scrapers_reach_the_endpoint(&name, &docs, &ds[0]["spec"]["template"]);
        let annotations = &ds[0]["spec"]["template"]["metadata"]["annotations"];
        match name.as_str() {
            "prometheus" => {
                assert_eq!(annotations["prometheus.io/scrape"], "true", "{name}: scrape annotations");
                assert_eq!(of_kind(&docs, "Service").len(), 1, "{name}: the headless Service");
            }
            "otlp" => {
                let env: Vec<&Value> = c["env"].as_array().expect("present in the manifest").iter().collect();
                assert!(env.iter().any(|e| e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT"), "{name}: OTLP endpoint");
                assert_eq!(of_kind(&docs, "Deployment").len(), 1, "{name}: the Collector");
            }
            _ => {}
        }
    }
    // The validator can refuse: a misspelt field in a rendered DaemonSet fails.
    let yaml = render(&kubernetes().join("base")).replace("hostPID: true", "hostPid: true");
    let bad = dir.join("misspelt.yaml");
    std::fs::write(&bad, yaml).expect("test files");
    let (ok, said) = validate(&bad);
    assert!(!ok && said.contains("hostPid"), "a misspelt field passed: {said}");
    std::fs::remove_dir_all(&dir).expect("test files");
}

/// The Collector example: OTLP in, Prometheus out, every pipeline component defined. (No
/// collector binary comes from the registries reachable here, so its own `validate` cannot run.)
#[test]
fn the_collector_example_receives_otlp_and_exports_prometheus() {
    let yaml = std::fs::read_to_string(kubernetes().join("overlays/otlp/otel-collector.yaml")).expect("test files");
    let c = &documents(&yaml)[0];
    assert!(c["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
        .as_str()
        .expect("present in the manifest")
        .ends_with(":4317"));
    assert!(c["exporters"]["prometheus"]["endpoint"].is_string());
    assert_eq!(
        c["exporters"]["prometheus"]["resource_to_telemetry_conversion"]["enabled"], true,
        "host.name as a label"
    );
    let p = &c["service"]["pipelines"]["metrics"];
    for (section, list) in [("receivers", "receivers"), ("processors", "processors"), ("exporters", "exporters")] {
        for name in strings(&p[list]) {
            assert!(c[section].get(&name).is_some(), "pipeline uses {section}.{name}, which is not defined");
        }
    }
    assert_eq!(strings(&p["receivers"]), ["otlp"]);
    assert!(strings(&p["exporters"]).contains(&"prometheus".to_string()));
}

/// Runs `tierscope ARGS --check-config` with `env` (and no other OTEL_* variables); returns
/// what it printed.
fn check_config(bin: &str, args: &[String], env: &[(String, String)]) -> String {
    let mut cmd = Command::new(bin);
    cmd.args(args).arg("--check-config");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("OTEL_")) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let out = run(&mut cmd);
    assert!(out.starts_with("tierscope: configuration ok"), "{args:?}: {out}");
    out
}

/// The stand-in for the pod's address from the downward API.
const POD_IP: &str = "192.0.2.7";

/// `$(VAR)` in an argument replaced as the kubelet does, from the container's environment.
fn expand(arg: &str, env: &[(String, String)]) -> String {
    env.iter().fold(arg.to_string(), |a, (k, v)| a.replace(&format!("$({k})"), v))
}

/// A container's environment as the kubelet would give it: `fieldRef`s as stand-in values,
/// `$(VAR)` expanded from the variables before it.
fn container_env(c: &Value) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for e in c["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().expect("present in the manifest").to_string();
        let mut value = match (e["value"].as_str(), e["valueFrom"]["fieldRef"]["fieldPath"].as_str()) {
            (Some(v), _) => v.to_string(),
            // An address, as the kubelet gives it (TEST-NET-1: never this machine's).
            (None, Some("status.podIP" | "status.hostIP")) => POD_IP.to_string(),
            (None, _) => format!("{}-of-this-pod", name.to_lowercase()),
        };
        for (k, v) in &env {
            value = value.replace(&format!("$({k})"), v);
        }
        env.push((name, value));
    }
    env
}

#[test]
#[ignore = "needs TIERSCOPE_BIN (cargo xtask test runs it)"]
fn the_manifests_arguments_and_config_are_ones_the_agent_accepts() {
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    for variant in variants() {
        let name = variant.file_name().expect("present in the manifest").to_string_lossy().to_string();
        let docs = documents(&render(&variant));
        let ds = of_kind(&docs, "DaemonSet")[0];
        let c = &ds["spec"]["template"]["spec"]["containers"][0];
        // The ConfigMap behind the /etc/tierscope mount, written where the arguments point.
        let config_map = ds["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .expect("present in the manifest")
            .iter()
            .find_map(|v| v["configMap"]["name"].as_str())
            .expect("config volume");
        let data = &of_kind(&docs, "ConfigMap")
            .into_iter()
            .find(|m| m["metadata"]["name"] == config_map)
            .expect("present in the manifest")["data"];
        let dir = tmp(&format!("config-{name}"));
        for (file, text) in data.as_object().expect("present in the manifest") {
            std::fs::write(dir.join(file), text.as_str().expect("test files")).expect("test files");
        }
        let env = container_env(c);
        let args: Vec<String> = strings(&c["args"])
            .into_iter()
            .map(|a| expand(&a, &env).replace("/etc/tierscope", dir.to_str().expect("present in the manifest")))
            .collect();
        let said = check_config(&bin, &args, &env);
        println!("{name}: {said}");
        // The pod's own address (the probe and scrape port), not every interface.
        assert!(
            said.contains(&format!("Prometheus on http://{POD_IP}:9464/metrics")),
            "{name}: the probe and scrape port on the pod IP: {said}"
        );
        assert!(!said.contains("0.0.0.0"), "{name}: {said}");
        assert!(said.contains("per job and rank"), "{name}: fleet granularity: {said}");
        if name == "otlp" {
            assert!(said.contains("OTLP gRPC to http://otel-collector.tierscope.svc:4317"), "{name}: {said}");
        }
        std::fs::remove_dir_all(&dir).expect("test files");
    }
    // The image's default command (Containerfile CMD).
    let containerfile = std::fs::read_to_string(root().join("deploy/image/Containerfile")).expect("test files");
    let cmd = containerfile.lines().find_map(|l| l.strip_prefix("CMD ")).expect("a CMD line");
    let args: Vec<String> = serde_json::from_str(cmd).expect("CMD in exec form");
    check_config(&bin, &args, &[]);
}

/// The unit's `KEY=VALUE` settings of [Service] (the last wins, as systemd reads them).
fn unit_settings() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(root().join("deploy/tierscope.service")).expect("test files");
    let mut section = String::new();
    let mut out = BTreeMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        if line.starts_with('[') {
            section = line.to_string();
        } else if section == "[Service]" {
            let (k, v) = line.split_once('=').expect("present in the manifest");
            out.insert(k.to_string(), v.to_string());
        }
    }
    out
}

#[test]
#[ignore = "needs TIERSCOPE_BIN (cargo xtask test runs it)"]
fn the_systemd_unit_verifies_with_the_four_capabilities_only() {
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let dir = tmp("unit");
    let unit = std::fs::read_to_string(root().join("deploy/tierscope.service")).expect("test files");
    let unit_file = dir.join("tierscope.service");
    std::fs::write(&unit_file, unit.replace("/usr/local/bin/tierscope", &bin)).expect("test files");
    let out =
        Command::new("systemd-analyze").args(["verify", "--man=no"]).arg(&unit_file).output().expect("child process");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
    let s = unit_settings();
    let caps: BTreeSet<String> = CAPABILITIES.iter().map(|c| format!("CAP_{c}")).collect();
    for key in ["AmbientCapabilities", "CapabilityBoundingSet"] {
        let got: BTreeSet<String> = s[key].split_whitespace().map(str::to_string).collect();
        assert_eq!(got, caps, "{key}");
    }
    assert_eq!(s["NoNewPrivileges"], "yes");
    assert!(!s.contains_key("ProtectProc"), "the agent reads every process's /proc");
    let exec: Vec<String> = s["ExecStart"].split_whitespace().skip(1).map(str::to_string).collect();
    let conf = dir.join("tierscope.toml");
    std::fs::write(&conf, std::fs::read_to_string(kubernetes().join("base/tierscope.toml")).expect("test files"))
        .expect("test files");
    let args: Vec<String> = exec
        .iter()
        .map(|a| a.replace("/etc/tierscope/tierscope.toml", conf.to_str().expect("present in the manifest")))
        .collect();
    // The node's own unit reads the Kubernetes config file: loopback only there.
    let said = check_config(&bin, &args, &[]);
    assert!(said.contains("Prometheus on http://127.0.0.1:9464/metrics"), "the unit's endpoint: {said}");
    std::fs::remove_dir_all(&dir).expect("test files");
}

/// GET over HTTP/1.0; the body.
fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// The node page allocations a Prometheus scrape counts, all nodes summed.
fn node_allocations(body: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with("tierscope_node_page_allocations_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("loopback port").local_addr().expect("loopback port").port()
}

/// systemd is not PID 1 here, so the unit cannot be started as a unit; its ExecStart runs with
/// the credentials the unit gives it (a user that is not root, the ambient capabilities, no new
/// privileges), the way systemd would start it, and collects.
#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn the_systemd_units_credentials_are_enough_to_collect() {
    require_root_and_agent!();
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let s = unit_settings();
    assert_eq!(s["DynamicUser"], "yes", "the stand-in below is for a dynamic user");
    let caps: Vec<String> = s["AmbientCapabilities"]
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let caps = caps.join(",");
    let listen = format!("127.0.0.1:{}", free_port());
    // nobody stands in for the dynamic user; the binary must be reachable by it.
    let dir = tmp("unit-run");
    let agent_copy = dir.join("tierscope");
    std::fs::copy(&bin, &agent_copy).expect("test files");
    use std::os::unix::fs::PermissionsExt as _;
    for p in [&dir, &agent_copy] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("test files");
    }
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs"])
        .arg(format!("--inh-caps=-all,{caps}"))
        .arg(format!("--ambient-caps=-all,{caps}"))
        .arg(format!("--bounding-set=-all,{caps}"))
        .arg(&agent_copy)
        .args(["run", "--prometheus", &listen, "--match", "deployment-unit-test"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux)");
    // The node counters appear (at 0) with the endpoint and move with the agent's readings: wait
    // for them to move (CI once scraped them still at 0 two seconds after they appeared), and
    // fail on the last scrape if they never do within a minute.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    let mut body = None;
    while Instant::now() < deadline {
        if let Some(b) = http_get(&listen, "/metrics").filter(|b| b.contains("tierscope_node_page_allocations_total")) {
            let moved = node_allocations(&b) > 0.0;
            body = Some(b);
            if moved {
                break;
            }
        }
        if child.try_wait().expect("child process").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let waited = started.elapsed();
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let out = child.wait_with_output().expect("child process");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let body = body.unwrap_or_else(|| panic!("no scrape from the agent run as the unit runs it; stderr:\n{stderr}"));
    let attached = body
        .lines()
        .find(|l| l.starts_with("tierscope_agent_programs") && l.contains("status=\"attached\""))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(attached >= 10.0, "only {attached} programs attached as the unit's user:\n{stderr}");
    let allocated = node_allocations(&body);
    assert!(allocated > 0.0, "no page allocations counted within {waited:?}:\n{body}\nstderr:\n{stderr}");
    println!("as the unit's user: {attached} programs attached, {allocated} pages allocated counted after {waited:?}");
    std::fs::remove_dir_all(&dir).expect("test files");
}

#[test]
#[ignore = "needs root, podman and TIERSCOPE_IMAGE (cargo xtask test builds the image)"]
fn the_image_runs_check_with_the_four_capabilities_only() {
    require_root_and_agent!();
    let image = std::env::var("TIERSCOPE_IMAGE").expect("TIERSCOPE_IMAGE: build it with `cargo xtask image`");
    let caps = CAPABILITIES.join(",");
    let podman = |args: &[&str]| {
        // runc: crun refuses this machine's hybrid cgroup layout. Lower rlimits than the
        // machine's: podman's defaults raise them, which needs CAP_SYS_RESOURCE here.
        Command::new("podman")
            .args(["--runtime", "runc", "run", "--rm", "--network=none", "--ulimit", "nofile=4096:4096"])
            .args(["--ulimit", "nproc=4096:4096"])
            .args(args)
            .output()
            .expect("podman (cargo xtask setup installs it)")
    };
    let out = podman(&[
        "--pid=host",
        "--cap-drop=all",
        &format!("--cap-add={caps}"),
        "--security-opt",
        "seccomp=unconfined",
        "--read-only",
        "-v",
        "/sys:/sys:ro",
        "-v",
        "/sys/kernel/tracing:/sys/kernel/tracing:ro",
        &image,
        "check",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "check in the image failed: {text}");
    let line = |prefix: &str| text.lines().find(|l| l.starts_with(prefix)).unwrap_or_default().to_string();
    let held = line("capabilities");
    for c in ["CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE"] {
        assert!(held.contains(c), "{c} not held in the container: {held}");
    }
    assert!(!held.contains("CAP_SYS_ADMIN"), "SYS_ADMIN must not be granted: {held}");
    let programs = line("programs");
    let attached: u32 = programs.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(attached >= 10, "the kernel programs did not attach in the container: {programs}\n{text}");
    assert!(line("tracefs").contains("/sys/kernel/tracing"), "{text}");
    println!("in the image: {programs}; {held}");
    // Nothing but the agent: no shell to run.
    let shell = podman(&["--entrypoint", "/bin/sh", &image, "-c", "true"]);
    assert!(!shell.status.success(), "the image has a shell");
}
