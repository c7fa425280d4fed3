//! Recognising training processes, their launcher (the job) and their rank. Pure: decides from
//! comm, command line, environment and mapped libraries that the collector read.
use serde::{Deserialize, Serialize};

/// What a process is to a training job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrainingRole {
    /// torchrun / deepspeed / accelerate launch / `python -m torch.distributed.run`: spawns workers.
    Launcher,
    /// A process doing the training (a rank, or a single-process job).
    Worker,
    /// A data-loader worker of a rank (`pt_data_worker`: `DataLoader(num_workers=N)`): shown under
    /// its rank and counted with it.
    DataWorker,
    /// Another child of a rank (a compile worker, a helper it spawned): shown under its rank and
    /// counted with it.
    RankChild,
}

impl TrainingRole {
    /// Whether its main thread's rhythm can be a training step: a rank's or a single process's,
    /// not a launcher's monitoring loop nor a data-loader worker's fetch loop (torchrun's showed
    /// three "steps" of its monitor on the GPU machine).
    pub fn has_steps(role: Option<TrainingRole>) -> bool {
        matches!(role, None | Some(TrainingRole::Worker))
    }

    /// The role in words, as the views show it.
    pub fn word(self) -> &'static str {
        match self {
            TrainingRole::Launcher => "launcher",
            TrainingRole::Worker => "worker",
            TrainingRole::DataWorker => "data worker",
            TrainingRole::RankChild => "child of a rank",
        }
    }

    /// Whether this process works for a rank rather than being one.
    pub fn serves_a_rank(self) -> bool {
        matches!(self, TrainingRole::DataWorker | TrainingRole::RankChild)
    }
}

/// The comm PyTorch gives its DataLoader worker processes.
const DATA_WORKER_COMM: &str = "pt_data_worker";

/// Whether a training process is a child of the rank `ancestor` rather than a rank of its own: a
/// DataLoader worker always is; another process is when it carries the same rank number (it
/// inherited the rank's environment: a compile worker, a helper). A child with another rank, or
/// with none under a parent without one (a wrapper script starting the trainer), is not.
pub fn child_of_rank(comm: &str, rank: &Rank, ancestor_rank: &Rank) -> Option<TrainingRole> {
    if comm.starts_with(DATA_WORKER_COMM) {
        return Some(TrainingRole::DataWorker);
    }
    (ancestor_rank.rank.is_some() && rank.rank == ancestor_rank.rank).then_some(TrainingRole::RankChild)
}

/// What the collector read about a process, for classification.
#[derive(Clone, Debug, Default)]
pub struct ProcessFacts<'a> {
    pub comm: &'a str,
    pub cmdline: &'a str,
    /// `KEY=VALUE` pairs of /proc/PID/environ, when readable.
    pub environ: &'a [(String, String)],
    /// Whether /proc/PID/maps shows libtorch (or another known training runtime) loaded.
    pub maps_training_runtime: bool,
    /// Whether the user's `--match` / config pattern matches it.
    pub user_match: bool,
}

/// Rank numbers from the launcher's environment variables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Rank {
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
}

const TRAINING_WORDS: &[&str] =
    &["torch", "deepspeed", "megatron", "accelerate", "lightning", "transformers", "jax", "train"];
const TRAINING_ENV: &[&str] =
    &["RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "DEEPSPEED_RANK", "MEGATRON_", "ACCELERATE_"];

fn env<'a>(environ: &'a [(String, String)], key: &str) -> Option<&'a str> {
    environ.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Classifies a process. A launcher is recognised by its command line; a worker by rank
/// variables, a loaded training runtime, a python command line naming a training framework, or
/// the user's pattern.
pub fn classify(f: &ProcessFacts<'_>) -> Option<TrainingRole> {
    let cmd = f.cmdline.to_ascii_lowercase();
    let has_rank_env =
        f.environ.iter().any(|(k, _)| TRAINING_ENV.iter().any(|t| k == t || (t.ends_with('_') && k.starts_with(t))));
    // A launcher has no rank of its own; its workers do (torchrun sets RANK only in children).
    if is_launcher(f.comm, &cmd) && env(f.environ, "RANK").is_none() && env(f.environ, "LOCAL_RANK").is_none() {
        return Some(TrainingRole::Launcher);
    }
    let python = f.comm.starts_with("python") || program(&cmd).starts_with("python");
    let framework_cmd = python && TRAINING_WORDS.iter().any(|w| cmd.contains(w));
    if has_rank_env || f.maps_training_runtime || framework_cmd || f.user_match {
        return Some(TrainingRole::Worker);
    }
    None
}

/// The basename of a command line's first word.
fn program(cmd: &str) -> &str {
    let first = cmd.split_whitespace().next().unwrap_or("");
    first.rsplit('/').next().unwrap_or(first)
}

/// Whether the command *runs* a launcher: the program itself, the script a python interpreter
/// runs, or the module of `python -m`. A launcher's name elsewhere in the arguments (a tmux or
/// shell command line that mentions torchrun) does not count.
fn is_launcher(comm: &str, cmd: &str) -> bool {
    const PROGRAMS: &[&str] = &["torchrun", "deepspeed"];
    const MODULES: &[&str] = &["torch.distributed.run", "torch.distributed.launch", "deepspeed.launcher.runner"];
    if PROGRAMS.contains(&comm) {
        return true;
    }
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    let Some(first) = words.first() else { return false };
    let prog = base(first);
    if PROGRAMS.contains(&prog.as_str()) || (prog == "accelerate" && words.get(1) == Some(&"launch")) {
        return true;
    }
    if !prog.starts_with("python") {
        return false;
    }
    // python [options] (-m MODULE | SCRIPT) ...
    let mut i = 1;
    while let Some(w) = words.get(i) {
        if *w == "-m" {
            return words.get(i + 1).is_some_and(|m| MODULES.contains(m));
        }
        if *w == "-c" {
            // `python -c CODE ARGS`: the code is the program, and a module named in ARGS is an
            // argument, not what runs.
            return false;
        }
        if !w.starts_with('-') {
            let script = base(w);
            return PROGRAMS.contains(&script.as_str())
                || (script == "accelerate" && words.get(i + 1) == Some(&"launch"));
        }
        i += 1;
    }
    false
}

/// RANK / LOCAL_RANK / WORLD_SIZE (DeepSpeed and MPI spellings as fallbacks).
pub fn rank(environ: &[(String, String)]) -> Rank {
    let num = |keys: &[&str]| keys.iter().find_map(|k| env(environ, k)?.trim().parse().ok());
    Rank {
        rank: num(&["RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"]),
        local_rank: num(&["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"]),
        world_size: num(&["WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]),
    }
}

/// The job name of a launcher: the elastic run id when it names one, else `comm-pid`.
pub fn job_name(launcher_comm: &str, launcher_pid: u32, environ: &[(String, String)]) -> String {
    match env(environ, "TORCHELASTIC_RUN_ID") {
        Some(id) if !id.is_empty() && id != "none" => id.to_string(),
        _ => format!("{launcher_comm}-{launcher_pid}"),
    }
}

/// Parses /proc/PID/environ (NUL-separated `KEY=VALUE`).
pub fn parse_environ(raw: &[u8]) -> Vec<(String, String)> {
    raw.split(|&b| b == 0)
        .filter_map(|kv| {
            let s = String::from_utf8_lossy(kv);
            let (k, v) = s.split_once('=')?;
            (!k.is_empty()).then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Whether a /proc/PID/maps text shows a training runtime loaded.
pub fn maps_show_training_runtime(maps: &str) -> bool {
    maps.lines().any(|l| {
        l.contains("libtorch_cpu.so")
            || l.contains("libtorch_python.so")
            || l.contains("libjax")
            || l.contains("libtensorflow")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envs(kv: &[(&str, &str)]) -> Vec<(String, String)> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn classifies_launchers_workers_and_others() {
        let none = envs(&[]);
        let worker_env = envs(&[("RANK", "1"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "2")]);
        let cases: &[(&str, &str, &[(String, String)], bool, Option<TrainingRole>)] = &[
            (
                "torchrun",
                "/usr/bin/python3 /usr/local/bin/torchrun --nproc-per-node 2 train.py",
                &none,
                false,
                Some(TrainingRole::Launcher),
            ),
            (
                "python3",
                "python3 -m torch.distributed.run --nproc_per_node=2 train.py",
                &none,
                false,
                Some(TrainingRole::Launcher),
            ),
            (
                "deepspeed",
                "/usr/bin/python3 /usr/local/bin/deepspeed train.py",
                &none,
                false,
                Some(TrainingRole::Launcher),
            ),
            ("python3", "/usr/bin/python3 -u train.py --local-rank=1", &worker_env, false, Some(TrainingRole::Worker)),
            ("pt_main_thread", "/usr/bin/python3 model.py", &none, true, Some(TrainingRole::Worker)),
            ("python3", "python3 -c import torch; torch.zeros(1)", &none, false, Some(TrainingRole::Worker)),
            ("python3", "python3 -m http.server", &none, false, None),
            ("bash", "bash -c torchrun", &worker_env, false, Some(TrainingRole::Worker)),
            ("sshd", "sshd: root@pts/0", &none, false, None),
            // Mentioning a launcher is not running one (seen on the GPU machine).
            (
                "tmux: server",
                "/usr/bin/tmux -L x new-session -d /usr/bin/tierscope top --match torchrun",
                &none,
                false,
                None,
            ),
            ("bash", "bash -c torchrun --nproc-per-node 2 t.py", &none, false, None),
            // Inline code that names the launcher's module in its arguments does not run it (a
            // python command line naming torch is still taken for a worker).
            (
                "python3",
                "python3 -c pass torch.distributed.run --nproc-per-node 2",
                &none,
                false,
                Some(TrainingRole::Worker),
            ),
            (
                "accelerate",
                "/usr/bin/python3 /usr/local/bin/accelerate launch t.py",
                &none,
                false,
                Some(TrainingRole::Launcher),
            ),
            ("python3", "python3 -u -m torch.distributed.launch t.py", &none, false, Some(TrainingRole::Launcher)),
        ];
        for (comm, cmdline, environ, maps, want) in cases {
            let f = ProcessFacts { comm, cmdline, environ, maps_training_runtime: *maps, user_match: false };
            assert_eq!(classify(&f), *want, "{comm} {cmdline}");
        }
        let f = ProcessFacts { comm: "myjob", cmdline: "./myjob", user_match: true, ..Default::default() };
        assert_eq!(classify(&f), Some(TrainingRole::Worker));
    }

    #[test]
    fn children_of_a_rank_are_told_from_ranks() {
        let r = |n| Rank { rank: Some(n), local_rank: Some(n), world_size: Some(2) };
        let none = Rank::default();
        let cases = [
            ("pt_data_worker", r(0), r(0), Some(TrainingRole::DataWorker)),
            ("pt_data_worker", none, none, Some(TrainingRole::DataWorker)),
            ("python3", r(0), r(0), Some(TrainingRole::RankChild)),
            // mp.spawn-style: a parent without a rank starting ranks.
            ("python3", r(1), none, None),
            ("python3", r(1), r(0), None),
            // A wrapper script (matched by --match) starting the trainer.
            ("python3", none, none, None),
        ];
        for (comm, rank, ancestor, want) in cases {
            assert_eq!(child_of_rank(comm, &rank, &ancestor), want, "{comm} {rank:?} under {ancestor:?}");
        }
    }

    #[test]
    fn reads_ranks_and_job_names() {
        let e = parse_environ(b"PATH=/bin\0RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=8\0TORCHELASTIC_RUN_ID=none\0junk\0=x\0");
        assert_eq!(rank(&e), Rank { rank: Some(3), local_rank: Some(1), world_size: Some(8) });
        assert_eq!(job_name("torchrun", 42, &e), "torchrun-42");
        let e2 = envs(&[("TORCHELASTIC_RUN_ID", "llama-7b"), ("RANK", "x")]);
        assert_eq!(job_name("torchrun", 42, &e2), "llama-7b");
        assert_eq!(rank(&e2), Rank::default());
        assert_eq!(rank(&envs(&[("OMPI_COMM_WORLD_RANK", "5")])).rank, Some(5));
    }

    #[test]
    fn finds_torch_in_maps() {
        assert!(maps_show_training_runtime(
            "7f00-7f10 r-xp 0 08:01 1 /usr/lib/python3/dist-packages/torch/lib/libtorch_cpu.so\n"
        ));
        assert!(!maps_show_training_runtime("7f00-7f10 r-xp 0 08:01 1 /usr/lib/libc.so.6\n"));
    }
}
