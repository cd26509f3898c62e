//! Hint keys that change while the process runs. A [`KeyWatch`] re-reads the key file on
//! SIGHUP and whenever its contents change (looked at every [`CHECK_EVERY`]), and
//! publishes the new keys; each worker holds a [`KeyReader`] and adopts them on its tick
//! (an atomic load; a lock and a copy of the keys only when they changed: no syscall, no
//! allocation), and signaling asks [`SharedKeys::current`] for each new session. A file
//! that no longer loads (its mode, its syntax) leaves the current keys in place, logged.
//!
//! The file lists the current key first (it encodes new hints) and optionally the previous
//! one (it still verifies). A rotation is two edits: `new` then `old` (sessions minted
//! under the old key keep verifying while new ones use the new key), and later `new`
//! alone (the old key stops verifying).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::{load_hint_keys, refuse_example_keys};
use crate::hint::HintKeys;
use crate::runtime::host::Host;

/// How often the key file is looked at for a change.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How often the watcher looks for SIGHUP and for its stop.
const WAKE_EVERY: Duration = Duration::from_millis(50);

/// What the watcher publishes.
#[derive(Debug)]
struct Published {
    keys: Mutex<HintKeys>,
    /// Bumped after every reload.
    generation: AtomicU64,
    stop: AtomicBool,
}

/// The process's current hint keys, as every part of it sees them: clone it freely.
#[derive(Clone, Debug)]
pub struct SharedKeys(Arc<Published>);

impl SharedKeys {
    /// Keys that never change (from the environment, or in tests).
    pub fn fixed(keys: HintKeys) -> Self {
        SharedKeys(Arc::new(Published {
            keys: Mutex::new(keys),
            generation: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        }))
    }

    /// The keys now (a lock and a copy): for signaling, once per session.
    pub fn current(&self) -> HintKeys {
        self.0
            .keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A worker's view, which reports each change once.
    pub fn reader(&self) -> KeyReader {
        KeyReader {
            shared: self.clone(),
            generation: self.0.generation.load(Ordering::Acquire),
        }
    }

    fn publish(&self, keys: HintKeys) {
        *self.0.keys.lock().unwrap_or_else(|e| e.into_inner()) = keys;
        self.0.generation.fetch_add(1, Ordering::Release);
    }
}

/// A worker's view of [`SharedKeys`].
#[derive(Debug)]
pub struct KeyReader {
    shared: SharedKeys,
    generation: u64,
}

impl KeyReader {
    /// The new keys, if they changed since the last call: an atomic load, and a lock and
    /// a copy (no allocation) when they did.
    pub fn changed(&mut self) -> Option<HintKeys> {
        let generation = self.shared.0.generation.load(Ordering::Acquire);
        if generation == self.generation {
            return None;
        }
        self.generation = generation;
        Some(self.shared.current())
    }
}

/// The thread that reloads the key file; stopped when dropped.
#[derive(Debug)]
pub struct KeyWatch {
    shared: SharedKeys,
    thread: Option<JoinHandle<()>>,
}

impl KeyWatch {
    /// Publishes `keys`, loaded from `file`, and reloads `file` on SIGHUP and when it
    /// changes; `on_reload` hears of each reload, with the new keys or `None` when the
    /// file was refused. A reload that brings an example secret is refused when `keys`
    /// had none (a process allowed to start with one, a test's, may reload them). Without a file (keys from the environment) nothing can change:
    /// SIGHUP is still taken, so that it does not end the process, and logged.
    pub fn start(
        file: Option<&Path>,
        keys: HintKeys,
        on_reload: impl Fn(Option<&HintKeys>) + Send + 'static,
    ) -> io::Result<KeyWatch> {
        let examples_allowed =
            keys.example_key().is_some() || Host::process().example_secrets_allowed();
        let shared = SharedKeys::fixed(keys);
        let hangup = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hangup))?;
        let watched = Watched {
            file: file.map(Path::to_path_buf),
            shared: shared.clone(),
            hangup,
            on_reload: Box::new(on_reload),
            examples_allowed,
        };
        let thread = std::thread::Builder::new()
            .name("hint-keys".into())
            .spawn(move || watched.run())?;
        Ok(KeyWatch {
            shared,
            thread: Some(thread),
        })
    }

    /// The keys this watch publishes.
    pub fn shared(&self) -> SharedKeys {
        self.shared.clone()
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        self.shared.0.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The watcher thread's state.
struct Watched {
    file: Option<PathBuf>,
    shared: SharedKeys,
    hangup: Arc<AtomicBool>,
    on_reload: OnReload,
    /// Whether a reload may bring an example secret ([`KeyWatch::start`]).
    examples_allowed: bool,
}

/// Told of each reload: the new keys, or `None` when the file was refused.
type OnReload = Box<dyn Fn(Option<&HintKeys>) + Send>;

impl Watched {
    fn run(self) {
        let mut seen = self.file.as_deref().and_then(|f| std::fs::read(f).ok());
        let mut next_check = Instant::now() + CHECK_EVERY;
        while !self.shared.0.stop.load(Ordering::Relaxed) {
            std::thread::sleep(WAKE_EVERY);
            let hangup = self.hangup.swap(false, Ordering::Relaxed);
            if !hangup && Instant::now() < next_check {
                continue;
            }
            next_check = Instant::now() + CHECK_EVERY;
            let Some(file) = &self.file else {
                if hangup {
                    tracing::warn!(
                        "SIGHUP: the hint keys come from the environment; nothing to reload"
                    );
                }
                continue;
            };
            let now = std::fs::read(file).ok();
            if !hangup && now == seen {
                continue;
            }
            seen = now;
            self.reload(file);
        }
    }

    fn reload(&self, file: &Path) {
        let loaded = load_hint_keys(Some(file), &Host::files_only())
            .and_then(|keys| refuse_example_keys(&keys, self.examples_allowed).map(|()| keys));
        match loaded {
            Ok(keys) => {
                tracing::info!(
                    file = %file.display(),
                    current = keys.current().id(),
                    previous = ?keys.previous_id(),
                    "hint keys reloaded"
                );
                // Published first: whoever hears of the reload finds the keys in place.
                self.shared.publish(keys.clone());
                (self.on_reload)(Some(&keys));
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    "hint keys not reloaded; the current keys stay in use"
                );
                (self.on_reload)(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hint::HintKey;

    fn keys(ids: &[u8]) -> HintKeys {
        let key = |id: u8| HintKey::new(id, &[id; 32]).unwrap();
        HintKeys::new(key(ids[0]), ids.get(1).map(|&id| key(id))).unwrap()
    }

    #[test]
    fn a_reader_sees_each_change_once_and_fixed_keys_never_change() {
        let shared = SharedKeys::fixed(keys(&[1]));
        let mut reader = shared.reader();
        assert!(reader.changed().is_none());
        shared.publish(keys(&[2, 1]));
        let seen = reader.changed().expect("a change");
        assert_eq!(seen.current().id(), 2);
        assert_eq!(seen.previous_id(), Some(1));
        assert!(reader.changed().is_none(), "reported once");
        assert_eq!(shared.current().current().id(), 2);
        // A reader made after the change starts from it.
        assert!(shared.reader().changed().is_none());
    }

    #[test]
    fn a_reload_that_brings_an_example_key_is_refused_when_the_start_had_none() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("ufrag-keywatch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("hint.keys");
        let write = |text: &str| {
            std::fs::write(&file, text).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        // A random key (none a test writes down can be a real one).
        let mut secret = [0u8; 32];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").unwrap(),
            &mut secret,
        )
        .unwrap();
        let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        let real = format!("1:{hex}\n");
        write(&real);
        let started = load_hint_keys(Some(&file), &Host::files_only()).unwrap();
        let (told, heard) = std::sync::mpsc::channel();
        let watch = KeyWatch::start(Some(&file), started, move |keys| {
            let _ = told.send(keys.map(HintKeys::previous_id));
        })
        .unwrap();
        // The tests' key, rotated in: refused, the real key stays in use.
        write(&format!(
            "2:{}\n{real}",
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        ));
        // SIGHUP asks for the reload whether or not the watcher saw the file before.
        signal_hook::low_level::raise(signal_hook::consts::SIGHUP).unwrap();
        let said = heard.recv_timeout(std::time::Duration::from_secs(10));
        drop(watch);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(said, Ok(None), "the reload was refused");
    }
}
