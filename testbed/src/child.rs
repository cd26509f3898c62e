//! Child processes a test or benchmark starts, owned so that none outlives its owner:
//! killed and reaped when the guard drops (a panicking test included), and killed by the
//! kernel when the thread that started it dies (`PR_SET_PDEATHSIG`), so that even a test
//! process killed by a timeout leaves nothing running.
#![allow(unsafe_code)]

use std::io;
use std::ops::{Deref, DerefMut};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::unistd::{Pid, getppid};

/// A running child that is killed and reaped on drop.
#[derive(Debug)]
pub struct OwnedChild {
    child: Child,
}

impl OwnedChild {
    /// Starts `command` with SIGKILL as its parent-death signal. Start it from the thread
    /// that lives as long as the child is used: the kernel sends the signal when that
    /// thread exits.
    pub fn spawn(command: &mut Command) -> io::Result<Self> {
        // SAFETY: the closure runs in the forked child before exec and calls only
        // prctl(2) and getppid(2), both async-signal-safe; it touches no memory shared
        // with the parent.
        unsafe {
            command.pre_exec(|| {
                prctl::set_pdeathsig(Signal::SIGKILL)?;
                // The parent may have died between fork and prctl.
                if getppid() == Pid::from_raw(1) {
                    return Err(io::Error::other("parent died before the child started"));
                }
                Ok(())
            });
        }
        Ok(OwnedChild {
            child: command.spawn()?,
        })
    }

    /// `None` while the child runs; once it has exited, its status and whatever it wrote
    /// to a piped stderr.
    pub fn exit_report(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        let mut err = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
        }
        Some(format!("{status}: {err}"))
    }

    /// Kills and reaps the child now (idempotent).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Deref for OwnedChild {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.child
    }
}

impl DerefMut for OwnedChild {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for OwnedChild {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use nix::sys::wait::{WaitPidFlag, waitpid};

    use super::*;

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
    }

    #[test]
    fn a_dropped_child_is_gone() {
        let child = OwnedChild::spawn(Command::new("sleep").arg("30")).unwrap();
        let pid = child.id();
        assert!(alive(pid));
        drop(child);
        assert!(!alive(pid), "the child survived its guard");
    }

    #[test]
    fn a_child_dies_with_the_thread_that_started_it_even_when_leaked() {
        let pid = std::thread::spawn(|| {
            let child = OwnedChild::spawn(Command::new("sleep").arg("30")).unwrap();
            let pid = child.id();
            // Leak the guard: only the parent-death signal can end the child now.
            std::mem::forget(child);
            pid
        })
        .join()
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while alive(pid) {
            // Reap it if it is our zombie, so `alive` can see it go.
            let _ = waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::WNOHANG));
            assert!(std::time::Instant::now() < deadline, "the orphan lives on");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
