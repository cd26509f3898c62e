//! Headless Chromium (Debian's `chromium`) running the transceiver's demo page
//! unattended (`/?auto=SECONDS&report=URL`), and the one-shot listener the page POSTs its
//! JSON result to. Used by the browser tests and by `perf sessions`.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::OwnedChild;
use crate::netns::in_netns;
use crate::testbed::Host;

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

/// Headless Chromium on a URL, with a fake microphone granted without asking; killed,
/// and its profile directory removed, on drop.
#[derive(Debug)]
pub struct Chromium {
    /// The browser process.
    pub child: OwnedChild,
    profile: PathBuf,
}

impl Chromium {
    /// Opens `url` (in `host`'s namespace when given).
    pub fn open(host: Option<&Host>, url: &str) -> io::Result<Chromium> {
        let chromium = installed("chromium", "scripts/test.sh (apt-get install chromium)")?;
        let profile = std::env::temp_dir().join(format!(
            "chromium-{}-{}",
            std::process::id(),
            crate::addr::unique_ip()
        ));
        let origin = url.split("/?").next().unwrap_or(url).to_string();
        let mut command = match host {
            Some(h) => h.command(&chromium.to_string_lossy()),
            None => Command::new(&chromium),
        };
        command
            .args([
                "--headless=new",
                "--no-sandbox", // root in CI
                "--disable-gpu",
                "--no-first-run",
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                "--allow-loopback-in-peer-connection",
            ])
            // getUserMedia needs a secure context; loopback is one, a testbed address is not.
            .arg(format!(
                "--unsafely-treat-insecure-origin-as-secure={origin}"
            ))
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = OwnedChild::spawn(&mut command)?;
        Ok(Chromium { child, profile })
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        self.child.stop();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
