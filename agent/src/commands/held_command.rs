//! `record -- CMD`'s command, started held at its exec until the agent watches it: the child
//! sends its pid through a pipe and waits on another before exec; the agent writes its
//! `SITE_BUDGET` entry (so the kernel gives one to every child it forks from its first
//! instruction on) and only then lets it exec. Without the hold a command that forked at once
//! (`sh -c 'work'`) had its first children, and a fast one all its allocations, before the
//! agent's entry: no CXL site was sampled from them (a recording of a 64 MiB touch had no site
//! in one run of three under load).
use std::{
    fs::File,
    io::{Read as _, Write as _},
    os::{
        fd::{AsRawFd as _, OwnedFd},
        unix::process::CommandExt as _,
    },
    process::Child,
};

use anyhow::{anyhow, Context as _, Result};

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    Ok(unsafe { (std::os::fd::FromRawFd::from_raw_fd(fds[0]), std::os::fd::FromRawFd::from_raw_fd(fds[1])) })
}

/// Starts the command (under sudo as the user who ran sudo, with all of that user's groups),
/// calls `ready` with its pid while it waits before its exec, then lets it exec. A command that
/// cannot start (not found, not permitted) is an error naming it, as `Command::spawn`'s.
pub fn spawn(command: &[String], ready: impl FnOnce(u32)) -> Result<Child> {
    let mut cmd = std::process::Command::new(&command[0]);
    cmd.args(&command[1..]);
    let who = crate::output_file::Invoker::current();
    let (acting_for, uid, gid, groups) = (who.acting_for, who.uid, who.gid, who.groups);
    let (pid_r, pid_w) = pipe().context("a pipe to start the command")?;
    let (gate_r, gate_w) = pipe().context("a pipe to start the command")?;
    let (pid_fd, gate_fd) = (pid_w.as_raw_fd(), gate_r.as_raw_fd());
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls
    // (setgroups, setgid, setuid, getpid, write, read) on data prepared before the fork; it
    // allocates nothing but the error it may return, as std's own pre-exec steps do.
    unsafe {
        cmd.pre_exec(move || {
            // std's `uid`/`gid` would drop the supplementary groups (setgroups(0)): set them
            // all, as initgroups would. The groups were looked up before the fork.
            if acting_for
                && (libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            let me = libc::getpid().to_ne_bytes();
            if libc::write(pid_fd, me.as_ptr().cast(), me.len()) != me.len() as isize {
                return Err(std::io::Error::last_os_error());
            }
            let mut go = 0u8;
            loop {
                match libc::read(gate_fd, (&raw mut go).cast(), 1) {
                    1 => return Ok(()),
                    0 => return Err(std::io::Error::other("tierscope stopped before the command could start")),
                    _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
                    _ => return Err(std::io::Error::last_os_error()),
                }
            }
        });
    }
    // `spawn` returns once the child has exec'd (or failed to), so it runs on a thread of its
    // own while this one waits for the pid, watches it and opens the gate. The thread closes
    // the parent's write end of the pid pipe after `spawn`: a fork that failed is then an end
    // of file here, not a wait forever.
    let starter = std::thread::Builder::new()
        .name("tierscope-spawn".into())
        .spawn(move || {
            let r = cmd.spawn();
            drop((pid_w, gate_r));
            r
        })
        .context("a thread to start the command")?;
    let mut pid = [0u8; 4];
    if File::from(pid_r).read_exact(&mut pid).is_ok() {
        ready(i32::from_ne_bytes(pid) as u32);
        // A failed write (the child died before reading) leaves `spawn` to say why.
        let _ = File::from(gate_w).write_all(&[1]);
    } else {
        drop(gate_w);
    }
    starter
        .join()
        .map_err(|_| anyhow!("the thread starting {:?} panicked", command[0]))?
        .with_context(|| format!("starting {:?} (is it on PATH?)", command[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_waits_for_ready_and_ready_gets_its_pid() {
        // The command writes whether the file `ready` makes exists: it can only if it ran after.
        let dir = std::env::temp_dir().join(format!("tierscope-held-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let flag = dir.join("watched");
        let said = dir.join("said");
        let script =
            format!("if test -e {}; then echo after; else echo before; fi > {}", flag.display(), said.display());
        let mut seen = None;
        let child = spawn(&["sh".into(), "-c".into(), script], |pid| {
            // Held: /proc shows the pid, still running tierscope's copy (not yet sh).
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe");
            assert_eq!(exe, std::env::current_exe().expect("me"), "the child has not exec'd yet");
            std::fs::write(&flag, b"").expect("flag");
            seen = Some(pid);
        })
        .expect("spawn");
        assert_eq!(seen, Some(child.id()), "ready got the child's pid");
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success());
        assert_eq!(std::fs::read_to_string(&said).expect("said"), "after\n", "the command ran after ready");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_command_that_cannot_start_is_an_error_naming_it() {
        let mut called = false;
        let e = spawn(&["/nonexistent/tierscope-no-such-command".into()], |_| called = true).expect_err("no such file");
        assert!(format!("{e:#}").contains("tierscope-no-such-command"), "{e:#}");
        assert!(called, "the pid came before the exec failed");
    }
}
