//! Headless browsers (Debian's `chromium` and `firefox-esr`) running the transceiver's
//! demo page unattended (`/?auto=SECONDS&report=URL`), and the one-shot listener the page
//! POSTs its JSON result to. Used by the browser tests and by `perf sessions`.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::OwnedChild;
use crate::netns::in_netns;
use crate::topology::Host;

/// `program` on `PATH`, or an error saying who installs it.
pub fn installed(program: &str, installer: &str) -> io::Result<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("`{program}` is not installed: {installer} installs it"),
            )
        })
}

/// A one-shot HTTP listener the demo page POSTs its result to.
#[derive(Debug)]
pub struct ReportListener {
    listener: TcpListener,
}

impl ReportListener {
    /// Listens on a free port of `ip`, inside namespace `ns` when given.
    pub fn bind(ns: Option<&str>, ip: IpAddr) -> io::Result<ReportListener> {
        let listener = in_netns(ns, move || TcpListener::bind((ip, 0)))??;
        listener.set_nonblocking(true)?;
        Ok(ReportListener { listener })
    }

    /// The URL to give the page as `report`.
    pub fn url(&self) -> String {
        let addr = self.listener.local_addr().expect("a bound listener");
        format!("http://{addr}/")
    }

    /// The body of the first POST (answered 204), waiting at most `limit`. `on_wait`
    /// runs between polls; when it returns a reason (the client exited, say), waiting
    /// stops with that as the error.
    pub fn receive(
        &self,
        limit: Duration,
        mut on_wait: impl FnMut() -> Option<String>,
    ) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + limit;
        let stream = loop {
            match self.listener.accept() {
                Ok((stream, _)) => break stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Some(why) = on_wait() {
                        return Err(io::Error::other(format!("no report: {why}")));
                    }
                    if Instant::now() >= deadline {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("no report within {limit:?}"),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        };
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut reader = BufReader::new(&stream);
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line)?;
            if line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().map_err(io::Error::other)?;
            }
        }
        // The page's result is a few hundred bytes; refuse anything absurd.
        if length > 1 << 20 {
            return Err(io::Error::other(format!("a {length}-byte report")));
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let _ = (&stream).write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
        Ok(body)
    }
}

/// A browser we did not write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Debian's `chromium`.
    Chromium,
    /// Debian's `firefox-esr`.
    Firefox,
}

/// A headless browser on a URL, with a fake microphone granted without asking; killed,
/// and its profile directory removed, on drop.
#[derive(Debug)]
pub struct Browser {
    /// The browser process.
    pub child: OwnedChild,
    profile: PathBuf,
}

/// Firefox preferences for an unattended run: a fake microphone without a prompt,
/// getUserMedia on plain HTTP (the testbed's origins are not secure contexts), loopback
/// ICE candidates, and nothing that phones home.
const FIREFOX_PREFS: &str = r#"user_pref("media.navigator.streams.fake", true);
user_pref("media.navigator.permission.disabled", true);
user_pref("media.devices.insecure.enabled", true);
user_pref("media.getusermedia.insecure.enabled", true);
user_pref("media.peerconnection.ice.loopback", true);
user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("toolkit.telemetry.enabled", false);
"#;

impl Browser {
    /// Opens `url` in `engine` (in `host`'s namespace when given).
    pub fn open(engine: Engine, host: Option<&Host>, url: &str) -> io::Result<Browser> {
        let profile = std::env::temp_dir().join(format!(
            "browser-{}-{}",
            std::process::id(),
            crate::addr::unique_ip()
        ));
        let (program, args) = match engine {
            Engine::Chromium => {
                let origin = url.split("/?").next().unwrap_or(url);
                let args = vec![
                    "--headless=new".to_string(),
                    "--no-sandbox".into(), // root in CI
                    "--disable-gpu".into(),
                    "--no-first-run".into(),
                    "--use-fake-ui-for-media-stream".into(),
                    "--use-fake-device-for-media-stream".into(),
                    "--allow-loopback-in-peer-connection".into(),
                    // getUserMedia needs a secure context; loopback is one, a testbed
                    // address is not.
                    format!("--unsafely-treat-insecure-origin-as-secure={origin}"),
                    format!("--user-data-dir={}", profile.display()),
                    url.into(),
                ];
                let program = installed("chromium", "scripts/test.sh (apt-get install chromium)")?;
                (program, args)
            }
            Engine::Firefox => {
                std::fs::create_dir_all(&profile)?;
                std::fs::write(profile.join("user.js"), FIREFOX_PREFS)?;
                let args = vec![
                    "--headless".to_string(),
                    "--no-remote".into(),
                    "--profile".into(),
                    profile.display().to_string(),
                    url.into(),
                ];
                let program = installed(
                    "firefox-esr",
                    "scripts/test.sh (apt-get install firefox-esr)",
                )?;
                (program, args)
            }
        };
        let mut command = match host {
            Some(h) => h.command(&program.to_string_lossy()),
            None => Command::new(&program),
        };
        command
            .args(&args)
            .env("MOZ_HEADLESS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = OwnedChild::spawn(&mut command)?;
        Ok(Browser { child, profile })
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.child.stop();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
