//! `skillhost serve`: the HTTP gateway (`skillhost::gateway`) over the demo
//! shop, with hot reload.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;

use skillhost::agent::{PendingConfirmation, RunStore, list_kept_runs};
use skillhost::embed::SkillHost;
use skillhost::gateway::{self, Gateway, GatewayConfig, RateLimits};
use skillhost::skills::signature::SignaturePolicy;

use super::hangup::{FollowedConfig, reloaded};
use super::{HostArgs, config, console};
use keys::bearer_key;

mod keys;

/// Where the gateway listens unless told otherwise: loopback only, so that
/// a gateway without API keys is not reachable from other machines.
const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Time in-flight requests get after SIGINT or SIGTERM. Default: 30 s, the
/// grace period container orchestrators give before killing a process.
const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// `skillhost serve`. Options left unset come from `--config`'s file, then
/// the defaults shown.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Routes: POST /v1/chat/completions (OpenAI-compatible; needs an LLM), \
    POST /v1/confirmations/{id}, GET /v1/confirmations/{id}, GET /v1/runs/{id}, GET /v1/models, GET /v1/skills, \
    GET /v1/skills/{name}, POST /v1/skills/{name}/invoke, POST and GET /mcp (MCP); admin: GET /v1/events, GET /v1/confirmations, GET /v1/tools, GET /metrics; \
    open: GET /healthz.\n\nSIGHUP reads the config file again (its HTTP tools, [agent], [confirmation], [llm], [sandbox] limits but memory, key scopes and \
    API keys' scopes take effect; it names any other setting changed, which waits for a restart), the trust store (unloading skills \
    no longer admitted), lists the MCP servers' tools again, rescans the skills directory and reads the API keys file again, without the restart that would \
    withdraw the runs waiting for an answer (unless --runs-dir keeps them). `serve --check` tells beforehand \
    whether a start with the same flags would serve.\n\nThe LLM is any OpenAI-compatible server: set SKILLHOST_MODEL, \
    OPENAI_BASE_URL and OPENAI_API_KEY (or [llm] in the config file). Without one, everything \
    but chat works and chat answers 503.\n\nPass keys through the environment rather than the \
    command line, where other users of the machine can read them."
)]
pub struct ServeArgs {
    /// Address to listen on, IP:PORT [default: 127.0.0.1:8080]. Beyond
    /// loopback, set API keys.
    #[arg(long, env = "SKILLHOST_LISTEN", value_name = "IP:PORT", value_parser = listen_address)]
    listen: Option<SocketAddr>,
    /// API keys clients send as `Authorization: Bearer <key>`; comma-separated
    /// or repeated. They go by api-key-1, api-key-2, … in events and logs.
    /// None (and no --api-keys-file): the API routes are open.
    #[arg(
        long = "api-key",
        value_name = "KEY",
        env = "SKILLHOST_API_KEYS",
        value_delimiter = ',',
        value_parser = bearer_key,
        hide_env_values = true
    )]
    api_keys: Vec<String>,
    /// A file of named API keys, one `NAME KEY` per line (`#` comments): a
    /// confirmation answered with a key is answered on behalf of its name,
    /// e.g. "approved by support-desk". Read again when it changes and at
    /// SIGHUP. Keep it readable by this user only.
    #[arg(long, value_name = "FILE", env = "SKILLHOST_API_KEYS_FILE")]
    api_keys_file: Option<PathBuf>,
    /// The key of the admin routes (events, pending confirmations, metrics).
    /// None: admin routes are open only when no API key is set either. It
    /// may answer confirmations too, as `admin`: with [confirmation]
    /// separate_approver, that is another key than a run's own.
    #[arg(
        long,
        value_name = "KEY",
        env = "SKILLHOST_ADMIN_KEY",
        value_parser = bearer_key,
        hide_env_values = true
    )]
    admin_key: Option<String>,
    /// Largest request body, in bytes [default: 1048576].
    #[arg(long, value_name = "BYTES", env = "SKILLHOST_BODY_LIMIT")]
    body_limit: Option<usize>,
    /// Time a request may take, in seconds [default: 300].
    #[arg(long, value_name = "SECONDS", env = "SKILLHOST_REQUEST_TIMEOUT")]
    request_timeout: Option<u64>,
    /// Tools the main agent keeps seeing even when skills absorb them,
    /// comma-separated; e.g. queryOrder,searchKnowledge,getCurrentTime, which
    /// the demo's skills would otherwise hide until one is loaded [default: none].
    #[arg(
        long,
        value_name = "TOOL",
        env = "SKILLHOST_KEEP_PUBLIC",
        value_delimiter = ','
    )]
    keep_public: Option<Vec<String>>,
    /// Load the skills directory (and the trust store and API keys file)
    /// once; do not watch them for changes (SIGHUP reads them all again).
    #[arg(long)]
    no_watch: bool,
    /// Seconds to let in-flight requests finish after SIGINT or SIGTERM
    /// [default: 30].
    #[arg(long, value_name = "SECONDS")]
    shutdown_grace: Option<u64>,
    /// Keep the runs waiting for a person's approval (skill invocations and
    /// chats) in this directory, created for this user alone, so that a
    /// restart does not lose them: the next serve on it resumes them, their
    /// confirmations pending again under the same ids; a run a crash cut
    /// short after a write's approval is reported (`GET /v1/runs/{id}`: the
    /// write may have run, or ran and returned what), not run again
    /// [default: none, they end with the process].
    #[arg(long, value_name = "DIR", env = "SKILLHOST_RUNS_DIR")]
    runs_dir: Option<PathBuf>,
    /// Check what this serve would start with, then exit without serving:
    /// the config file, API keys, trust store and every skill file, the
    /// HTTP tools, the MCP servers (connected and asked for their tools)
    /// and the LLM settings (the model is not called). Exits 0 when it
    /// would serve every skill file, 1 naming what is wrong. Binds no
    /// address and resumes no kept run (it lists them); the demo shop's
    /// database is created when missing, as serve would.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    pub(super) host: HostArgs,
}

pub async fn serve(args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let file = args.host.config_file()?;
    let server = &file.server;
    let hot_reload = !args.check && !args.no_watch && server.hot_reload.unwrap_or(true);
    let runs_dir = args.runs_dir.clone().or_else(|| server.runs_dir.clone());
    let settings = super::HostSettings::read(
        &args.host,
        &file,
        file.agent_config(args.keep_public.clone()),
    )?;
    report_trust(&settings.policy);
    let keys::ApiKeys {
        keys: api_keys,
        file_bytes: keys_file_bytes,
    } = keys::api_keys(&args.api_keys, args.api_keys_file.as_deref())?;
    let has_api_keys = !api_keys.is_empty();
    let with_keys = has_api_keys || args.admin_key.is_some();
    let scopes = server.scopes()?;
    let rate_limits = server.rate_limits()?;
    // After every setting that needs no network: a mistake in them is
    // reported without waiting on an MCP server.
    let super::Started {
        host,
        trust,
        trust_watch: _trust_watch,
    } = settings
        .start(
            &args.host,
            &file,
            hot_reload,
            runs_dir.as_deref().filter(|_| !args.check),
        )
        .await?;
    report_host(&host, hot_reload, &file);
    let forward_headers = server.forward_headers(with_keys)?;
    if let Some(dir) = runs_dir.as_ref().filter(|_| !forward_headers.is_empty()) {
        console::warn(&format!(
            "[server] forward_headers is set: a run whose request carries one of them is not kept \
             in {} (forwarded headers are never written to disk), so a restart withdraws it",
            dir.display()
        ));
    }
    let gateway = Gateway::new(
        host,
        GatewayConfig {
            api_keys,
            admin_key: args.admin_key.clone(),
            body_limit: args
                .body_limit
                .or(server.body_limit)
                .unwrap_or(gateway::DEFAULT_BODY_LIMIT),
            request_timeout: args
                .request_timeout
                .or(server.request_timeout_secs)
                .map_or(gateway::DEFAULT_REQUEST_TIMEOUT, Duration::from_secs),
            header_timeout: server
                .header_timeout_secs
                .map_or(gateway::DEFAULT_HEADER_TIMEOUT, |secs| {
                    Duration::from_secs(secs.get())
                }),
            max_connections: server
                .max_connections
                .unwrap_or(gateway::DEFAULT_MAX_CONNECTIONS),
            max_parked_runs: server
                .max_parked_runs
                .unwrap_or(gateway::DEFAULT_MAX_PARKED_RUNS),
            max_parked_runs_per_principal: server.max_parked_runs_per_principal,
            allowed_hosts: server.allowed_hosts.clone().unwrap_or_default(),
            cors_origins: server.cors_origins.clone().unwrap_or_default(),
            forward_headers,
            scopes,
            rate_limits,
        },
    );
    warn_of_names_no_key_goes_by(&gateway);
    let listen = match args.listen.or(server.listen) {
        Some(listen) => listen,
        None => DEFAULT_LISTEN.parse().expect("a valid default address"),
    };
    if args.check {
        warn_if_open(listen, has_api_keys);
        return Ok(report_check(&gateway, listen, runs_dir.as_deref()));
    }
    let (reloaded, given, keys_file) = (
        gateway.clone(),
        args.api_keys.clone(),
        args.api_keys_file.clone(),
    );
    let config = args.host.config.clone().map(|path| {
        let keep_public = args.keep_public.clone();
        FollowedConfig::new(path, &file, keep_public, &KEY_SETTINGS)
    });
    super::hangup::reload_on_hangup(gateway.host().clone(), trust, config, move |config| {
        if let Some(file) = &keys_file {
            keys::reload(&reloaded, &given, file);
        }
        if let Some(config) = config {
            reload_scopes(&reloaded, config);
            reload_rate_limits(&reloaded, config);
        }
        warn_of_names_no_key_goes_by(&reloaded);
    })
    .context("listening for SIGHUP")?;
    // Held while serving: dropping it ends the watch.
    let _keys_watcher = match &args.api_keys_file {
        Some(file) if hot_reload => {
            let (gateway, given, path) = (gateway.clone(), args.api_keys.clone(), file.clone());
            Some(keys::watch(file.clone(), keys_file_bytes, move || {
                keys::reload(&gateway, &given, &path);
                warn_of_names_no_key_goes_by(&gateway);
            })?)
        }
        _ => None,
    };
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    let address = listener.local_addr()?;
    warn_if_open(address, has_api_keys);
    // Listened for before anyone is told the gateway serves, so that a
    // signal from then on shuts it down gracefully.
    let signals = count_signals().context("listening for SIGINT and SIGTERM")?;
    console::say(&format!(
        "skillhost serving on http://{address} (OpenAI base URL http://{address}/v1)"
    ));

    let mut first = signals.clone();
    let served = gateway.serve(listener, async move {
        let _ = first.wait_for(|&signals| signals >= 1).await;
        console::say("shutting down: letting in-flight requests and runs finish");
    });
    let grace = args
        .shutdown_grace
        .or(server.shutdown_grace_secs)
        .map_or(DEFAULT_SHUTDOWN_GRACE, Duration::from_secs);
    // Past the grace, or at a second signal, the requests still running
    // are cut: the exit status says so.
    let mut later = signals;
    let cut_short = async move {
        let _ = later.wait_for(|&signals| signals >= 1).await;
        tokio::select! {
            () = tokio::time::sleep(grace) => format!("in-flight requests and runs did not finish within {grace:?}"),
            _ = later.wait_for(|&signals| signals >= 2) => "a second signal came".to_owned(),
        }
    };
    tokio::select! {
        served = served => {
            served.context("serving")?;
            report_withdrawn(gateway.host());
            Ok(ExitCode::SUCCESS)
        }
        why = cut_short => {
            console::warn(&format!("{why}; exiting with requests or runs unfinished"));
            report_withdrawn(gateway.host());
            report_interrupted(gateway.host());
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Warns when `address` is reachable from other machines and no API key
/// guards it.
fn warn_if_open(address: SocketAddr, has_api_keys: bool) {
    if !address.ip().is_loopback() && !has_api_keys {
        console::warn(&format!(
            "{address} is served without API keys: anyone who can reach it can run skills and \
             approve writes (set SKILLHOST_API_KEYS)"
        ));
    }
}

/// `serve --check`, once the gateway stands as the start made it: the
/// runs directory looked at (not taken), then the verdict. A skill file
/// that did not load fails the check, which serve would start without.
fn report_check(gateway: &Gateway, listen: SocketAddr, runs_dir: Option<&Path>) -> ExitCode {
    let host = gateway.host();
    let snapshot = host.snapshot();
    let mut problems: Vec<String> = snapshot
        .failures()
        .map(|failure| format!("{} did not load", failure.path.display()))
        .collect();
    // A directory missing is created at the start, holding nothing.
    if let Some(dir) = runs_dir.filter(|dir| dir.exists()) {
        match RunStore::check(dir) {
            Ok(()) => {
                let (kept, unreadable) = list_kept_runs(dir);
                if !kept.is_empty() {
                    console::say(&format!(
                        "{} run(s) kept in {} would be resumed",
                        kept.len(),
                        dir.display()
                    ));
                }
                for file in unreadable {
                    console::warn(&format!(
                        "{} would not be resumed: {}",
                        file.path.display(),
                        file.reason
                    ));
                }
            }
            Err(error) => problems.push(error.to_string()),
        }
    }
    let warnings = match console::warnings() {
        0 => String::new(),
        count => format!(", {count} warning(s) above"),
    };
    if problems.is_empty() {
        console::say(&format!(
            "check passed{warnings}: serve would start with {} skill(s) and {} tool(s), on \
             http://{listen}",
            snapshot.skills().count(),
            host.tools().specs().count()
        ));
        ExitCode::SUCCESS
    } else {
        console::error(&format!("check failed{warnings}: {}", problems.join("; ")));
        ExitCode::FAILURE
    }
}

/// The settings of the config file that API keys are held to (their
/// scopes and request rates), which `serve` reads again at a SIGHUP.
const KEY_SETTINGS: [&str; 4] = [
    "server.skill_scopes",
    "server.tool_scopes",
    "server.requests_per_minute",
    "server.key_requests_per_minute",
];

/// Puts the API keys' scopes of `file` (the config file read again) in
/// force, and says so when they changed. Scopes that do not check keep
/// those in force, saying why.
fn reload_scopes(gateway: &Gateway, file: &config::ConfigFile) {
    match file.server.scopes() {
        Ok(scopes) => {
            if *gateway.scopes() != scopes {
                let count = scopes.key_names().count();
                // In force before it is said: a client told may rely on it.
                gateway.set_scopes(scopes);
                let said = format!(
                    "API keys' scopes read again from {}: {count} key(s) scoped",
                    file.path().display()
                );
                reloaded(gateway.host(), "api_key_scopes", Ok(said));
            }
        }
        Err(error) => {
            let why = format!("{error:#}; the scopes in force stay");
            reloaded(gateway.host(), "api_key_scopes", Err(why));
        }
    }
}

/// Puts the API keys' request rates of `file` (the config file read
/// again) in force, and says so when they changed: a key whose rate
/// changed starts with a full bucket, the others keep theirs. Rates that
/// do not check keep those in force, saying why.
fn reload_rate_limits(gateway: &Gateway, file: &config::ConfigFile) {
    match file.server.rate_limits() {
        Ok(limits) => {
            if gateway.rate_limits() != limits {
                let said = format!(
                    "API keys' request rates read again from {}: {}",
                    file.path().display(),
                    describe_rates(&limits)
                );
                gateway.set_rate_limits(limits);
                reloaded(gateway.host(), "api_key_rates", Ok(said));
            }
        }
        Err(error) => {
            let why = format!("{error:#}; the rates in force stay");
            reloaded(gateway.host(), "api_key_rates", Err(why));
        }
    }
}

/// `limits` as a person reads them: `60 requests a minute per key, batch
/// 600`.
fn describe_rates(limits: &RateLimits) -> String {
    let every = match limits.per_key {
        Some(rate) => format!("{rate} requests a minute per key"),
        None => "no limit per key".to_owned(),
    };
    let named = limits
        .keys
        .iter()
        .map(|(name, rate)| format!(", {name} {rate}"));
    std::iter::once(every).chain(named).collect()
}

/// Warns of what the settings in force name that no key in force goes by
/// (a misspelt name, or a key not yet in the keys file), and of a separate
/// approver required on a gateway without keys: at the start, and again
/// whenever the keys or those settings are read again.
fn warn_of_names_no_key_goes_by(gateway: &Gateway) {
    let principals = gateway.key_names();
    let config = gateway.host().agent().config();
    let policy = &config.confirmation;
    if policy.separate_approver && principals.is_empty() {
        console::warn(
            "[confirmation] separate_approver is set but the gateway has no keys: no answer names \
             an approver, so writes can only be rejected or expire (set SKILLHOST_API_KEYS or \
             --api-keys-file)",
        );
    }
    let approvers = policy.approvers.iter().flatten();
    let approvers = approvers.chain(policy.tool_approvers.values().flatten());
    warn_of_unknown_key_names(
        "[confirmation] names approvers",
        approvers,
        &principals,
        "a call only they may approve can only be rejected or expire",
    );
    let scopes = gateway.scopes();
    let rates = gateway.rate_limits();
    for (table, named, meanwhile) in [
        (
            "[server.skill_scopes]",
            Vec::from_iter(scopes.skills.keys()),
            "its scope limits nobody",
        ),
        (
            "[server.tool_scopes]",
            Vec::from_iter(scopes.tools.keys()),
            "its scope limits nobody",
        ),
        (
            "[server.key_requests_per_minute]",
            Vec::from_iter(rates.keys.keys()),
            "its rate limits nobody",
        ),
    ] {
        warn_of_unknown_key_names(
            &format!("{table} names keys"),
            named.into_iter(),
            &principals,
            meanwhile,
        );
    }
}

/// Warns of the key names a setting gives (`names`:
/// `[confirmation] names approvers`) that no key of this gateway goes by,
/// saying what that leaves (`meanwhile`).
fn warn_of_unknown_key_names<'a>(
    names: &str,
    named: impl Iterator<Item = &'a String>,
    principals: &[String],
    meanwhile: &str,
) {
    let unknown: BTreeSet<&str> = named
        .filter(|name| !principals.contains(name))
        .map(String::as_str)
        .collect();
    if unknown.is_empty() {
        return;
    }
    let unknown: Vec<&str> = unknown.into_iter().collect();
    let keys = if principals.is_empty() {
        "the gateway has no keys".to_owned()
    } else {
        format!("its keys go by {}", principals.join(", "))
    };
    console::warn(&format!(
        "{names} that no key of this gateway goes by: {}; {keys}. Until a key \
         with that name is added (--api-keys-file is read again when it changes), {meanwhile}",
        unknown.join(", ")
    ));
}

/// Says what becomes of the confirmations still waiting at exit: those of
/// runs kept on disk wait again at the next start; the others end with the
/// process, and their ids will not be known to the next one.
fn report_withdrawn(host: &SkillHost) {
    let (kept, withdrawn): (Vec<_>, Vec<_>) =
        host.confirmations()
            .pending()
            .into_iter()
            .partition(|pending| {
                host.run_store()
                    .is_some_and(|store| store.holds(&pending.run))
            });
    let summaries = |waiting: &[PendingConfirmation]| {
        let calls: Vec<&str> = waiting
            .iter()
            .map(|pending| pending.summary.as_str())
            .collect();
        calls.join("; ")
    };
    if let Some(store) = host.run_store().filter(|_| !kept.is_empty()) {
        console::say(&format!(
            "{} run(s) waiting for an answer are kept in {} and wait again at the next start: {}",
            kept.len(),
            store.dir().display(),
            summaries(&kept)
        ));
    }
    if !withdrawn.is_empty() {
        console::warn(&format!(
            "{} confirmation(s) still waiting are withdrawn with their runs: {}",
            withdrawn.len(),
            summaries(&withdrawn)
        ));
    }
}

/// Warns of the runs an exit cuts short after a person approved their call:
/// the approval stays on disk, and the next start tells the run's requester
/// (and the approver) rather than run anything again.
fn report_interrupted(host: &SkillHost) {
    let Some(store) = host.run_store() else {
        return;
    };
    let (kept, _) = list_kept_runs(store.dir());
    let approved: Vec<String> = kept
        .iter()
        .filter(|run| run.approved_at.is_some())
        .map(|run| {
            let call = if run.returned.is_some() {
                "it returned"
            } else {
                "under way"
            };
            format!("{} ({call})", run.summary)
        })
        .collect();
    if approved.is_empty() {
        return;
    }
    console::warn(&format!(
        "{} run(s) are cut short after their call was approved: {}; the next start tells their \
         requesters, and `skillhost runs --runs-dir {}` lists them",
        approved.len(),
        approved.join("; "),
        store.dir().display()
    ));
}

/// What loaded, what did not, limits set for skills that did not, and
/// whether chat is available.
fn report_host(host: &SkillHost, hot_reload: bool, file: &config::ConfigFile) {
    super::report_skills(host, hot_reload, file);
    match host.llm() {
        Ok(llm) => console::say(&format!(
            "LLM: {} at {}",
            llm.config().model,
            llm.config().base_url
        )),
        Err(why) => console::say(&format!("no LLM: chat completions answer 503 ({why})")),
    }
}

/// Says which keys skills must be signed with, and warns when others could
/// add one, or one is the demo key (`--allow-unsigned` has warned already).
pub(super) fn report_trust(policy: &SignaturePolicy) {
    let SignaturePolicy::Require(store) = policy else {
        return;
    };
    for trusted in store.keys() {
        console::say(&format!(
            "trusting key {} ({})",
            trusted.fingerprint(),
            trusted.source().display()
        ));
    }
    if let Some(demo) = super::sign::trusted_demo_key(store) {
        console::warn(&format!(
            "key {demo} is the demo key, whose secret half is published with skillhost: anyone \
             can sign skills this host loads; outside a demo, trust only your own keys (--trust, \
             skillhost keygen)"
        ));
    }
}

/// Counts SIGINTs (Ctrl-C) and SIGTERMs from now on: the first shuts the
/// gateway down gracefully, a second cuts the grace short.
fn count_signals() -> std::io::Result<watch::Receiver<u32>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let (count, counted) = watch::channel(0);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            count.send_modify(|signals| *signals += 1);
        }
    });
    Ok(counted)
}

/// `--listen`: a socket address, with an example when it is not one (a
/// bare port, or a host name, is the usual slip).
fn listen_address(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        let port = text.rsplit_once(':').map_or(text, |(_, port)| port);
        match port.parse::<u16>() {
            Ok(port) if port.to_string() == text => format!(
                "expected IP:PORT, e.g. 127.0.0.1:{port} (loopback) or 0.0.0.0:{port} (every \
                 interface)"
            ),
            Ok(port) => format!(
                "expected IP:PORT: an address, not a host name (names are not resolved), e.g. \
                 127.0.0.1:{port} (loopback) or 0.0.0.0:{port} (every interface)"
            ),
            Err(_) => "expected IP:PORT, e.g. 127.0.0.1:8080".to_owned(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::listen_address;

    #[test]
    fn a_listen_address_slip_gets_an_example_of_the_form() {
        assert_eq!(listen_address("0.0.0.0:9000").unwrap().port(), 9000);
        let bare_port = listen_address("8080").unwrap_err();
        assert!(
            bare_port.contains("127.0.0.1:8080 (loopback)"),
            "{bare_port}"
        );
        let host_name = listen_address("localhost:18941").unwrap_err();
        assert!(
            host_name.contains("not a host name") && host_name.contains("127.0.0.1:18941"),
            "{host_name}"
        );
        let nonsense = listen_address("anywhere").unwrap_err();
        assert_eq!(nonsense, "expected IP:PORT, e.g. 127.0.0.1:8080");
    }
}
