//! The host's files and environment as the configuration reads them ([`Host`], the
//! runtime's [`ConfigSources`]): files from the file system, a secret refused when others
//! may read it, and environment variables from the process or given outright.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;

use crate::config::{ALLOW_EXAMPLE_SECRETS_ENV, ConfigError, ConfigSources};

/// The files and environment a configuration is read from: the file system, and the
/// process's environment (unless [`Host::files_only`]) with any values given by
/// [`Host::with_env`] taking precedence.
#[derive(Clone, Debug, Default)]
pub struct Host {
    /// Values given outright, by name: they win over the process's environment.
    given: Vec<(String, String)>,
    /// Whether the process's environment is read at all.
    ignore_process_env: bool,
}

impl Host {
    /// The file system and the process's environment.
    pub fn process() -> Self {
        Host::default()
    }

    /// The file system only: no environment variable is set (a hint-key reload reads the
    /// key file alone).
    pub fn files_only() -> Self {
        Host {
            given: Vec::new(),
            ignore_process_env: true,
        }
    }

    /// This host with the environment variable `name` reading `value`, whatever the
    /// process's environment holds (tests give their keys this way).
    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.given.retain(|(given, _)| given != name);
        self.given.push((name.to_string(), value.to_string()));
        self
    }
}

impl Host {
    /// Whether this process may run with the example secrets the documentation shows
    /// ([`ALLOW_EXAMPLE_SECRETS_ENV`] set to `1`): for a demonstration, never production.
    pub fn example_secrets_allowed(&self) -> bool {
        self.env_var(ALLOW_EXAMPLE_SECRETS_ENV).as_deref() == Some("1")
    }
}

impl ConfigSources for Host {
    fn read_file(&self, field: &str, path: &Path, secret: bool) -> Result<Vec<u8>, ConfigError> {
        let cannot_read = |e: std::io::Error| ConfigError {
            field: field.to_string(),
            reason: format!("cannot read {}: {e}", path.display()),
        };
        if secret {
            let meta = std::fs::metadata(path).map_err(cannot_read)?;
            let mode = meta.permissions().mode() & 0o777;
            // Group access is allowed to this process's own group only: that is how a
            // non-root container reads a Kubernetes Secret (owned by root, group fsGroup,
            // mode 0440).
            let own_group = meta.gid() == rustix::process::getegid().as_raw();
            if mode & 0o007 != 0 || (mode & 0o070 != 0 && !own_group) {
                return Err(ConfigError {
                    field: field.to_string(),
                    reason: format!(
                        "{} has mode {mode:04o}: it must not be readable by others, nor by a \
                         group other than this process's own (chmod 600)",
                        path.display()
                    ),
                });
            }
        }
        std::fs::read(path).map_err(cannot_read)
    }

    fn env_var(&self, name: &str) -> Option<String> {
        let given = self.given.iter().find(|(given, _)| given == name);
        let value = match given {
            Some((_, value)) => Some(value.clone()),
            None if self.ignore_process_env => None,
            None => std::env::var(name).ok(),
        };
        value.filter(|value| !value.is_empty())
    }
}
