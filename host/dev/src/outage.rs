//! Breaking a running plane on purpose, for resilience tests: pause a component (as a
//! hung process or a partition looks to clients), restart the API server on the same
//! etcd, and compact etcd so that old resource versions are gone.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::api;
use crate::components::{APISERVER, ETCD, wait_until};
use crate::plane::Plane;
use crate::process::{self, Lifetime};

impl Plane {
    fn signal(&self, component: &str, signal: libc::c_int) -> Result<()> {
        let (_, pid) = self
            .pids()
            .into_iter()
            .find(|(name, _)| *name == component)
            .with_context(|| format!("{component} is not running in this plane"))?;
        // SAFETY: kill(2) on a pid this plane started; no memory is involved.
        if unsafe { libc::kill(pid as libc::pid_t, signal) } != 0 {
            bail!("cannot signal {component}: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Freeze a component (SIGSTOP): its connections stay open but nothing answers.
    pub fn pause(&self, component: &str) -> Result<()> {
        self.signal(component, libc::SIGSTOP)
    }

    /// Let a paused component run again (SIGCONT).
    pub fn resume(&self, component: &str) -> Result<()> {
        self.signal(component, libc::SIGCONT)
    }

    /// Kill kube-apiserver and start it again with the same command line on the same
    /// etcd; returns once it is ready. Every client's watches break.
    pub async fn restart_apiserver(&self) -> Result<()> {
        let dir = self
            .dir
            .clone()
            .context("an external cluster cannot be restarted")?;
        let mut old = {
            let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
            let i = procs
                .iter()
                .position(|p| p.name == APISERVER)
                .context("kube-apiserver is not running in this plane")?;
            procs.remove(i)
        };
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", old.pid()))
            .context("reading kube-apiserver's command line")?;
        let mut argv = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned());
        let program = argv.next().context("empty command line")?;
        let args: Vec<String> = argv.collect();
        old.kill(Duration::from_secs(5));
        let log = dir.join(format!("{APISERVER}-restarted.log"));
        let mut new = process::spawn(
            APISERVER,
            std::path::Path::new(&program),
            args,
            &dir,
            log,
            Lifetime::Attached,
        )?;
        let client = self.client().await?;
        let ready = wait_until(&mut new, Duration::from_secs(60), "GET /readyz", || {
            api::readyz(&client)
        })
        .await;
        self.procs.lock().unwrap_or_else(|p| p.into_inner()).push(new);
        ready
    }

    /// Compact etcd up to its current revision: every older resource version is gone,
    /// so a watch resumed from one gets "410 Gone / too old resource version".
    pub async fn compact_etcd(&self) -> Result<u64> {
        if !self.pids().iter().any(|(name, _)| *name == ETCD) {
            bail!("etcd is not running in this plane");
        }
        let port = self.ports().etcd_client;
        // etcd's JSON gateway: keys are base64 ("Lw==" is "/").
        let range = etcd_post(port, "/v3/kv/range", r#"{"key":"Lw=="}"#).await?;
        let revision: u64 = range["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .context("etcd reported no revision")?;
        let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
        etcd_post(port, "/v3/kv/compaction", &body).await?;
        Ok(revision)
    }
}

async fn etcd_post(port: u16, path: &str, body: &str) -> Result<serde_json::Value> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    let (head, body) = text.split_once("\r\n\r\n").context("malformed etcd reply")?;
    if head.split_whitespace().nth(1) != Some("200") {
        bail!("etcd {path}: {}", head.lines().next().unwrap_or_default());
    }
    serde_json::from_str(body).with_context(|| format!("etcd {path} reply"))
}
