//! The tools of an MCP server, on a real server on loopback: listed across
//! pages, called in the session, errors kept apart, a forgotten session
//! renewed, and a declaration that does not fit the server refused at start.
//! Then a server started as a command (a Python script), spoken to on its
//! standard streams: started again when it ends, told when a call is given up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use skillhost::embed::{HostEvent, SkillHost};
use skillhost::skills::{FailureKind, ReloadEvent, ReloadOutcome};
use skillhost::tools::http::Forwarded;
use skillhost::tools::mcp::{McpServerConfig, connect};
use skillhost::tools::{Access, ToolCaller, ToolContext, ToolError, ToolRegistry};
use skillhost::trace_context::TraceContext;

use crate::support::mcp::{McpServer, STDIO_SERVER, python};
use crate::support::signing::{demo_policy, signed_skill_calling};

fn declared(url: &str) -> McpServerConfig {
    McpServerConfig {
        name: "crm".into(),
        url: Some(url.into()),
        // risky.tool is not a name a model can call: it is left out.
        tools: Some(vec![
            "lookupCustomer".into(),
            "updateCustomer".into(),
            "customerReport".into(),
        ]),
        read: vec!["lookupCustomer".into(), "customerReport".into()],
        ..McpServerConfig::default()
    }
}

async fn registry_of(config: &McpServerConfig) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for tool in connect(config, |_| None).await.unwrap() {
        registry.register(tool).unwrap();
    }
    registry
}

#[tokio::test]
async fn an_mcp_servers_tools_are_listed_across_pages_and_called_in_its_session() {
    let server = McpServer::default();
    let url = server.start().await;
    let registry = registry_of(&declared(&url)).await;

    let specs: Vec<_> = registry
        .specs()
        .map(|spec| (spec.name.as_str(), spec.access, spec.description.as_str()))
        .collect();
    assert_eq!(
        specs,
        [
            ("customerReport", Access::Read, "A report, streamed."),
            ("lookupCustomer", Access::Read, "Look a customer up by id."),
            // Its readOnlyHint is the server's claim; `read` does not name it.
            ("updateCustomer", Access::Write, "Update a customer"),
        ]
    );
    assert_eq!(
        registry
            .call("lookupCustomer", json!({"id": "u1001"}))
            .await
            .unwrap(),
        json!({"id": "u1001", "name": "Li Lei", "level": "gold"})
    );
    assert_eq!(
        registry
            .call(
                "updateCustomer",
                json!({"id": "u1001", "level": "platinum"})
            )
            .await
            .unwrap(),
        json!({"id": "u1001", "level": "platinum"})
    );
    // Answered as an event stream, after a notification.
    assert_eq!(
        registry.call("customerReport", json!({})).await.unwrap(),
        json!("3 customers")
    );

    let received = server.received();
    let methods: Vec<&str> = received.iter().map(|r| r.method.as_str()).collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/list",
            "tools/call",
            "tools/call",
            "tools/call",
        ]
    );
    for after_initialize in &received[1..] {
        assert_eq!(after_initialize.session.as_deref(), Some("session-1"));
        assert_eq!(after_initialize.protocol.as_deref(), Some("2025-06-18"));
    }
}

#[tokio::test]
async fn a_tool_error_is_a_rejection_and_invalid_arguments_never_reach_the_server() {
    let server = McpServer::default();
    let url = server.start().await;
    let registry = registry_of(&declared(&url)).await;

    let refused = registry
        .call("lookupCustomer", json!({"id": "u9"}))
        .await
        .unwrap_err();
    assert_eq!(
        refused,
        ToolError::Rejected("lookupCustomer: no customer \"u9\"".into())
    );
    let Err(ToolError::InvalidArguments { message, .. }) = registry
        .call("updateCustomer", json!({"id": "u1001"}))
        .await
    else {
        panic!("arguments without `level` accepted");
    };
    assert!(message.contains("level"), "{message}");
    assert_eq!(
        server.calls(),
        [("lookupCustomer".to_owned(), json!({"id": "u9"}))]
    );
}

/// `forward_headers`: the run's header goes with each tool call (and
/// with nothing the host sends on its own); a run without it is refused
/// before the server sees the call.
#[tokio::test]
async fn a_tool_call_carries_the_header_the_run_was_started_with() {
    let server = McpServer::default();
    let url = server.start().await;
    let mut config = declared(&url);
    config.forward_headers = vec!["X-User-Id".into()];
    let registry = registry_of(&config).await;
    let mut forwarded = Forwarded::default();
    forwarded.append("x-user-id".parse().unwrap(), "agent-7".parse().unwrap());
    let context = ToolContext::new().with(forwarded);
    let arguments = json!({"id": "u1001"});
    registry
        .call_as(
            ToolCaller::Host,
            &context,
            "lookupCustomer",
            arguments.clone(),
        )
        .await
        .unwrap();
    let Err(ToolError::NotPermitted { reason, .. }) =
        registry.call("lookupCustomer", arguments).await
    else {
        panic!("a call without the header was sent");
    };
    assert!(reason.contains("`x-user-id` header"), "{reason}");
    let users: Vec<(String, Option<String>)> = server
        .received()
        .into_iter()
        .map(|received| (received.method, received.user))
        .collect();
    let by_host = |method: &str| (method.to_owned(), None);
    assert_eq!(
        users,
        [
            by_host("initialize"),
            by_host("notifications/initialized"),
            by_host("tools/list"),
            by_host("tools/list"),
            ("tools/call".to_owned(), Some("agent-7".to_owned())),
        ]
    );
}

/// A call made in a trace carries it in `params._meta` (MCP's SEP-414)
/// and, over HTTP, in its headers; what the host sends on its own does not.
#[tokio::test]
async fn a_tool_call_carries_the_trace_of_its_run_in_meta_and_headers() {
    let server = McpServer::default();
    let url = server.start().await;
    let registry = registry_of(&declared(&url)).await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let trace = TraceContext::parse(traceparent, Some("congo=t61rcWkgMzE")).unwrap();
    let context = ToolContext::new().with(trace);
    registry
        .call_as(
            ToolCaller::Host,
            &context,
            "lookupCustomer",
            json!({"id": "u1001"}),
        )
        .await
        .unwrap();
    let traces: Vec<(String, Option<String>, Value)> = server
        .received()
        .into_iter()
        .map(|received| {
            let meta = received.params.get("_meta").cloned().unwrap_or_default();
            (received.method, received.traceparent, meta)
        })
        .collect();
    let by_host = |method: &str| (method.to_owned(), None, Value::Null);
    assert_eq!(
        traces,
        [
            by_host("initialize"),
            by_host("notifications/initialized"),
            by_host("tools/list"),
            by_host("tools/list"),
            (
                "tools/call".to_owned(),
                Some(traceparent.to_owned()),
                json!({"traceparent": traceparent, "tracestate": "congo=t61rcWkgMzE"}),
            ),
        ]
    );
}

#[tokio::test]
async fn a_session_the_server_forgot_is_renewed_and_the_call_sent_once_more() {
    let server = McpServer::default();
    let url = server.start().await;
    let registry = Arc::new(registry_of(&declared(&url)).await);
    server.forget_sessions();

    // Two calls at once find the session gone: one new session serves both.
    let call = |id: &str| {
        let registry = Arc::clone(&registry);
        let arguments = json!({"id": id, "level": "gold"});
        async move { registry.call("updateCustomer", arguments).await }
    };
    let (first, second) = tokio::join!(call("u1"), call("u2"));
    assert_eq!(first.unwrap()["id"], "u1");
    assert_eq!(second.unwrap()["id"], "u2");
    let received = server.received();
    let initializations = received.iter().filter(|r| r.method == "initialize").count();
    assert_eq!(initializations, 2, "{received:?}");
    let answered: Vec<Option<&str>> = received
        .iter()
        .filter(|r| r.method == "tools/call")
        .map(|r| r.session.as_deref())
        .collect();
    assert_eq!(
        answered,
        [
            Some("session-1"),
            Some("session-1"),
            Some("session-2"),
            Some("session-2")
        ]
    );
}

#[tokio::test]
async fn a_declaration_that_does_not_fit_the_server_stops_the_start_naming_it() {
    let server = McpServer::default();
    let url = server.start().await;
    let refusal =
        async |config: McpServerConfig| connect(&config, |_| None).await.err().unwrap().to_string();

    // A misspelt name in `read` would leave a read confirmed as a write, in
    // `tools` a tool missing: either stops the start.
    let mut misspelt = declared(&url);
    misspelt.read.push("lookupCustomr".into());
    let message = refusal(misspelt).await;
    assert!(
        message.starts_with(&format!(
            "MCP server `crm` ({url}): read names `lookupCustomr`"
        )) && message.contains("lookupCustomer, risky.tool, updateCustomer"),
        "{message}"
    );
    // Every tool, risky.tool included, which no model could call.
    let mut all = declared(&url);
    all.tools = None;
    let message = refusal(all).await;
    assert!(
        message.contains("tool `risky.tool`: not a name a model can call"),
        "{message}"
    );
    // A header secret that is not set.
    let mut secret = declared(&url);
    secret
        .headers
        .insert("Authorization".into(), "Bearer ${CRM_MCP_TOKEN}".into());
    let message = refusal(secret).await;
    assert!(message.contains("`CRM_MCP_TOKEN`"), "{message}");
    // A protocol revision the host does not speak.
    let old = McpServer::default().speaking("2024-11-05");
    let old_url = old.start().await;
    let message = refusal(declared(&old_url)).await;
    assert!(message.contains("speaks MCP 2024-11-05"), "{message}");
    // Nothing listening.
    let gone = "http://127.0.0.1:9/mcp";
    let message = refusal(declared(gone)).await;
    assert!(
        message.starts_with(&format!("MCP server `crm` ({gone}): initialize: ")),
        "{message}"
    );
}

/// The server of `tests/support/mcp_stdio_server.py`, started with
/// python3, logging the messages it gets to `log`; its region comes from
/// the host's `${CRM_REGION_FOR_TEST}`.
fn started(log: &Path) -> McpServerConfig {
    McpServerConfig {
        name: "crm".into(),
        command: Some(python().into()),
        args: vec![STDIO_SERVER.into(), log.display().to_string()],
        env: BTreeMap::from([("CRM_REGION".into(), "${CRM_REGION_FOR_TEST}".into())]),
        read: vec!["lookupCustomer".into(), "environment".into()],
        ..McpServerConfig::default()
    }
}

fn region(name: &str) -> Option<String> {
    (name == "CRM_REGION_FOR_TEST").then(|| "east".to_owned())
}

async fn registry_of_started(config: &McpServerConfig) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for tool in connect(config, region).await.unwrap() {
        registry.register(tool).unwrap();
    }
    registry
}

/// The messages the started server logged: `(process id, what)`.
fn logged(log: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|line| {
            let (pid, what) = line.split_once(' ').unwrap();
            (pid.to_owned(), what.to_owned())
        })
        .collect()
}

#[tokio::test]
async fn a_server_started_as_a_command_is_spoken_to_on_its_standard_streams() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("received");
    let registry = registry_of_started(&started(&log)).await;

    let specs: Vec<_> = registry
        .specs()
        .map(|spec| (spec.name.as_str(), spec.access))
        .collect();
    assert_eq!(
        specs,
        [
            ("crash", Access::Write),
            ("deaf", Access::Write),
            ("environment", Access::Read),
            ("lookupCustomer", Access::Read),
            ("offer", Access::Write),
            ("slow", Access::Write),
        ]
    );
    // Past a banner that is not JSON, the server's ping and its
    // notifications, the answer.
    assert_eq!(
        registry
            .call("lookupCustomer", json!({"id": "u1001"}))
            .await
            .unwrap(),
        json!({"id": "u1001", "name": "Li Lei", "region": "east"})
    );
    // The process sees its own variables, PATH and HOME, and none other of
    // the host's (cargo's CARGO_*, say). Python may add its locale.
    let names = registry.call("environment", json!({})).await.unwrap();
    let names: Vec<&str> = names
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|name| name.as_str())
        .filter(|name| *name != "LC_CTYPE")
        .collect();
    let inherited = ["HOME", "PATH"]
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some());
    let expected: Vec<&str> = std::iter::once("CRM_REGION").chain(inherited).collect();
    assert_eq!(names, expected);

    let received = logged(&log);
    let what: Vec<&str> = received.iter().map(|(_, what)| what.as_str()).collect();
    assert_eq!(
        what,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/call lookupCustomer",
            "answer",
            "tools/call environment",
        ]
    );
    assert!(received.iter().all(|(pid, _)| *pid == received[0].0));
}

#[tokio::test]
async fn a_server_process_that_ends_fails_its_call_and_the_next_call_starts_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("received");
    let registry = registry_of_started(&started(&log)).await;

    let Err(ToolError::Failed(message)) = registry.call("crash", json!({})).await else {
        panic!("the call the process ended in succeeded");
    };
    assert!(
        message.starts_with("crash (MCP server `crm`): the server process ended")
            && message.ends_with("it last wrote: crash: giving up"),
        "{message}"
    );
    assert_eq!(
        registry
            .call("lookupCustomer", json!({"id": "u1002"}))
            .await
            .unwrap()["id"],
        "u1002"
    );

    let received = logged(&log);
    let first = &received[0].0;
    let (before, after): (Vec<_>, Vec<_>) = received.iter().partition(|(pid, _)| pid == first);
    let what = |messages: Vec<&(String, String)>| -> Vec<String> {
        messages.into_iter().map(|(_, what)| what.clone()).collect()
    };
    assert_eq!(what(before).last().unwrap(), "tools/call crash");
    // The call the process ended in is not sent again: the tool may have acted.
    assert_eq!(
        what(after),
        [
            "initialize",
            "notifications/initialized",
            "tools/call lookupCustomer",
            "answer",
        ]
    );
}

#[tokio::test]
async fn a_call_the_server_does_not_answer_in_time_fails_and_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("received");
    let mut config = started(&log);
    config.timeout_secs = Some(1);
    let registry = registry_of_started(&config).await;

    let Err(ToolError::Failed(message)) = registry.call("slow", json!({})).await else {
        panic!("a call past its time succeeded");
    };
    assert_eq!(message, "slow (MCP server `crm`): no answer within 1 s");
    // The server reads the cancellation once its tool returns.
    let cancelled = async {
        while !logged(&log)
            .iter()
            .any(|(_, what)| what == "notifications/cancelled")
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), cancelled)
        .await
        .expect("the server was not told the call is cancelled");
}

/// A server that stops reading its input: a call that cannot be written
/// fails after the timeout instead of waiting for ever, and the next call
/// finds a new process.
#[tokio::test]
async fn a_server_that_reads_no_more_is_given_up_and_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("received");
    let mut config = started(&log);
    config.timeout_secs = Some(1);
    let registry = registry_of_started(&config).await;

    let Err(ToolError::Failed(message)) = registry.call("deaf", json!({})).await else {
        panic!("a call past its time succeeded");
    };
    assert!(message.ends_with("no answer within 1 s"), "{message}");
    // More than a pipe holds: the write cannot finish.
    let long_id = "u".repeat(1 << 20);
    let Err(ToolError::Failed(message)) = registry
        .call("lookupCustomer", json!({"id": long_id}))
        .await
    else {
        panic!("a call to a server that reads nothing succeeded");
    };
    assert!(
        message.ends_with("the server process did not read its input for 1 s"),
        "{message}"
    );
    let found = registry
        .call("lookupCustomer", json!({"id": "u1003"}))
        .await
        .unwrap();
    assert_eq!(found["id"], "u1003");
    let processes: std::collections::BTreeSet<String> =
        logged(&log).into_iter().map(|(pid, _)| pid).collect();
    assert_eq!(processes.len(), 2);
}

#[tokio::test]
async fn a_command_that_cannot_start_or_ends_at_once_stops_the_start_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("received");
    let refusal =
        async |config: McpServerConfig| connect(&config, region).await.err().unwrap().to_string();

    let mut missing = started(&log);
    missing.command = Some("skillhost-no-such-mcp-server".into());
    let message = refusal(missing).await;
    assert!(
        message.starts_with(
            "MCP server `crm` (command `skillhost-no-such-mcp-server`): cannot start it: "
        ),
        "{message}"
    );
    // A server that exits at once: what it wrote on stderr says why.
    let mut failing = started(&log);
    failing.args = vec![
        "-c".into(),
        "import sys; sys.stderr.write('usage: crm --db PATH\\n'); sys.exit(2)".into(),
    ];
    let message = refusal(failing).await;
    assert!(
        message.starts_with(&format!(
            "MCP server `crm` (command `{}`): initialize: the server process ended",
            python()
        )) && message.ends_with("it last wrote: usage: crm --db PATH"),
        "{message}"
    );
    // An environment secret that is not set.
    let mut secret = started(&log);
    secret
        .env
        .insert("CRM_TOKEN".into(), "${CRM_TOKEN_NOT_SET}".into());
    let message = refusal(secret).await;
    assert!(
        message.ends_with("environment variable `CRM_TOKEN_NOT_SET` (used in env) is not set"),
        "{message}"
    );
    // Settings of the other transport, or of both.
    let mut headers = started(&log);
    headers
        .headers
        .insert("Authorization".into(), "Bearer x".into());
    let message = refusal(headers).await;
    assert!(message.contains("headers and forward_headers are for a server reached at a url"));
    let mut both = started(&log);
    both.url = Some("http://127.0.0.1:9/mcp".into());
    let message = refusal(both).await;
    assert!(
        message.ends_with("give either a url or a command, not both"),
        "{message}"
    );
    let neither = McpServerConfig {
        name: "crm".into(),
        ..McpServerConfig::default()
    };
    let message = refusal(neither).await;
    assert_eq!(
        message,
        "MCP server `crm`: give the server's url, or the command that starts it"
    );
}

/// The skills directory of a host following an MCP server: one packed,
/// signed instruction-only skill per `(name, tool it calls)`.
fn skills_calling(tools: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, tool) in tools {
        let bytes = signed_skill_calling(name, tool);
        std::fs::write(dir.path().join(format!("{name}.wasm")), bytes).unwrap();
    }
    dir
}

/// The next change to the file `path` that `reloads` report.
async fn change_of(reloads: &mut broadcast::Receiver<ReloadEvent>, path: &Path) -> ReloadEvent {
    let next = async {
        loop {
            let event = reloads.recv().await.unwrap();
            if event.path == path {
                return event;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), next)
        .await
        .expect("the change within 10 s")
}

#[tokio::test]
async fn a_host_follows_the_tools_a_server_started_as_a_command_says_changed() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("received");
    let skills = skills_calling(&[
        ("orderDesk", "lookupOrder"),
        ("customerDesk", "lookupCustomer"),
    ]);
    let (order_desk, customer_desk) = (
        skills.path().join("orderDesk.wasm"),
        skills.path().join("customerDesk.wasm"),
    );
    let server = McpServerConfig {
        env: BTreeMap::new(),
        ..started(&log)
    };
    let host = SkillHost::builder(skills.path(), demo_policy())
        .mcp_server(server)
        .hot_reload(false)
        .build()
        .await
        .unwrap();
    let at_start = host.snapshot();
    assert!(at_start.get("customerDesk").is_some());
    let refused = at_start
        .failure_for(&order_desk)
        .expect("orderDesk refused");
    assert_eq!(refused.kind, FailureKind::Manifest);
    assert!(
        refused
            .reason
            .contains("`lookupOrder`, which is not a registered tool"),
        "{}",
        refused.reason
    );

    // The server adds lookupOrder and says so: the skill naming it loads,
    // without a restart.
    let mut reloads = host.skills().subscribe();
    let mut told = host.subscribe();
    let offer = |tool: &str, offered: bool| {
        let tools = host.tools();
        let arguments = json!({"tool": tool, "offered": offered});
        async move { tools.call("offer", arguments).await.unwrap() }
    };
    offer("lookupOrder", true).await;
    let loaded = change_of(&mut reloads, &order_desk).await;
    assert_eq!(loaded.outcome, ReloadOutcome::Loaded);
    assert_eq!(loaded.new.unwrap().name.as_str(), "orderDesk");
    let change = loop {
        if let HostEvent::Tools(change) = told.recv().await.unwrap() {
            break change;
        }
    };
    assert_eq!(
        (
            change.server.as_deref(),
            &change.added[..],
            change.removed.len()
        ),
        (Some("crm"), &["lookupOrder".to_owned()][..], 0)
    );
    assert_eq!(
        host.mcp_tool_servers()
            .get("lookupOrder")
            .map(String::as_str),
        Some("crm")
    );
    assert_eq!(
        host.tools()
            .call("lookupOrder", json!({"id": "A1"}))
            .await
            .unwrap(),
        json!({"tool": "lookupOrder", "id": "A1"})
    );
    // A run holds the snapshot it started on: its tools did not change.
    assert!(!at_start.tools().contains("lookupOrder"));
    assert!(at_start.get("orderDesk").is_none());

    // The server takes lookupCustomer away: the skill calling it goes,
    // saying why, and its file waits for the tool.
    offer("lookupCustomer", false).await;
    let unloaded = change_of(&mut reloads, &customer_desk).await;
    let ReloadOutcome::Unresolved { reason } = &unloaded.outcome else {
        panic!("not unresolved: {unloaded:?}");
    };
    assert!(
        reason.contains("`lookupCustomer`, which is not a registered tool"),
        "{reason}"
    );
    assert_eq!(unloaded.old.unwrap().name.as_str(), "customerDesk");
    let snapshot = host.snapshot();
    assert!(snapshot.get("customerDesk").is_none());
    assert!(!snapshot.tools().contains("lookupCustomer"));
    assert_eq!(
        snapshot
            .failure_for(&customer_desk)
            .map(|failure| failure.kind),
        Some(FailureKind::Manifest)
    );
    assert!(at_start.get("customerDesk").is_some());

    // And back: the file loads again.
    offer("lookupCustomer", true).await;
    let back = change_of(&mut reloads, &customer_desk).await;
    assert_eq!(back.outcome, ReloadOutcome::Loaded);
    assert!(host.snapshot().failure_for(&customer_desk).is_none());
    // One session throughout: the host listed the tools again, in it.
    let received = logged(&log);
    assert!(received.iter().all(|(pid, _)| *pid == received[0].0));
    let listings = received
        .iter()
        .filter(|(_, what)| what == "tools/list")
        .count();
    assert_eq!(listings, 4, "{received:?}");
}

/// A host following the server at `url`, whose one skill, reportDesk,
/// calls customerReport: the host, its skills directory, the skill's file.
async fn report_desk_following(url: &str) -> (SkillHost, tempfile::TempDir, PathBuf) {
    let skills = skills_calling(&[("reportDesk", "customerReport")]);
    let report_desk = skills.path().join("reportDesk.wasm");
    let host = SkillHost::builder(skills.path(), demo_policy())
        .mcp_server(declared(url))
        .hot_reload(false)
        .build()
        .await
        .unwrap();
    assert!(host.snapshot().get("reportDesk").is_some());
    (host, skills, report_desk)
}

#[tokio::test]
async fn a_server_reached_at_a_url_is_listed_again_when_asked_and_when_it_restarted() {
    let server = McpServer::default();
    let url = server.start().await;
    let (host, _skills, report_desk) = report_desk_following(&url).await;

    // Deployed without customerReport: at the operator's word (SIGHUP in
    // `serve`), the host lists the tools again and the skill goes.
    server.offer("customerReport", false);
    let events = host.relist_mcp_tools().await;
    let [unloaded] = events.as_slice() else {
        panic!("one change: {events:?}");
    };
    assert_eq!(unloaded.path, report_desk);
    assert!(matches!(unloaded.outcome, ReloadOutcome::Unresolved { .. }));
    assert!(!host.tools().contains("customerReport"));
    assert!(host.tools().contains("lookupCustomer"));
    // Listed again with nothing changed: nothing to do.
    assert!(host.relist_mcp_tools().await.is_empty());

    // Restarted with it: the next call opens a new session, and the host
    // lists the tools of the new server on its own.
    server.offer("customerReport", true);
    server.forget_sessions();
    let mut reloads = host.skills().subscribe();
    let arguments = json!({"id": "u1001"});
    host.tools()
        .call("lookupCustomer", arguments)
        .await
        .unwrap();
    let loaded = change_of(&mut reloads, &report_desk).await;
    assert_eq!(loaded.outcome, ReloadOutcome::Loaded);
    assert!(host.tools().contains("customerReport"));
}

#[tokio::test]
async fn a_host_follows_a_server_at_a_url_that_says_on_its_stream_that_its_tools_changed() {
    let server = McpServer::default().streaming();
    let url = server.start().await;
    let (host, _skills, report_desk) = report_desk_following(&url).await;
    let mut reloads = host.skills().subscribe();

    server.offer("customerReport", false);
    server.say_tools_changed().await;
    let unloaded = change_of(&mut reloads, &report_desk).await;
    assert!(matches!(unloaded.outcome, ReloadOutcome::Unresolved { .. }));
    // The server's ping on the stream was answered, in its session.
    let answered = server
        .received()
        .into_iter()
        .filter(|received| received.method == "answer")
        .map(|received| received.session)
        .collect::<Vec<_>>();
    assert_eq!(answered, [Some("session-1".to_owned())]);

    // Restarted: the new session's stream is listened to, the old one's
    // given up.
    server.offer("customerReport", true);
    server.forget_sessions();
    host.tools()
        .call("lookupCustomer", json!({"id": "u1001"}))
        .await
        .unwrap();
    let loaded = change_of(&mut reloads, &report_desk).await;
    assert_eq!(loaded.outcome, ReloadOutcome::Loaded);
    let listening = async {
        while server.listening() != ["session-2"] {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), listening)
        .await
        .unwrap_or_else(|_| panic!("listening to {:?}", server.listening()));
}

/// A stream that ends is opened again, and the tools listed again then:
/// what the server said while no stream was open is not missed.
#[tokio::test]
async fn a_stream_opened_again_has_the_tools_listed_again() {
    let server = McpServer::default().streaming();
    let url = server.start().await;
    let (host, _skills, report_desk) = report_desk_following(&url).await;
    let mut reloads = host.skills().subscribe();
    let open = async || {
        while server.listening().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), open())
        .await
        .unwrap();

    // Dropped while the stream is down: nobody is told.
    server.close_streams();
    server.offer("customerReport", false);
    let unloaded = change_of(&mut reloads, &report_desk).await;
    assert!(matches!(unloaded.outcome, ReloadOutcome::Unresolved { .. }));
    tokio::time::timeout(Duration::from_secs(10), open())
        .await
        .unwrap();
}

/// The servers replaced on a running host: declared as before, a server
/// stays as it is (no new session); taken out, its tools go and it is
/// followed no more, so a relist or a change it tells brings nothing back;
/// declared again, it is connected anew.
#[tokio::test]
async fn replaced_servers_keep_those_declared_as_before_and_follow_no_server_taken_out() {
    let server = McpServer::default();
    let url = server.start().await;
    let (host, _skills, report_desk) = report_desk_following(&url).await;
    let sessions = || {
        let received = server.received();
        let initialized = received.iter().filter(|got| got.method == "initialize");
        initialized.count()
    };
    assert_eq!(sessions(), 1);

    let same = host.replace_mcp_servers(&[declared(&url)]).await.unwrap();
    assert!(same.tools.is_empty() && same.reloads.is_empty(), "{same:?}");
    assert_eq!(
        sessions(),
        1,
        "a server declared as before is not connected again"
    );

    let mut events = host.subscribe();
    let emptied = host.replace_mcp_servers(&[]).await.unwrap();
    assert_eq!(emptied.tools.server, None);
    assert_eq!(
        emptied.tools.removed,
        ["customerReport", "lookupCustomer", "updateCustomer"]
    );
    let [unloaded] = emptied.reloads.as_slice() else {
        panic!("one change: {emptied:?}");
    };
    assert_eq!(unloaded.path, report_desk);
    assert!(host.mcp_tool_servers().is_empty());
    let told = tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(told, HostEvent::Tools(change) if change.removed.len() == 3));
    assert!(host.relist_mcp_tools().await.is_empty());
    assert!(!host.tools().contains("customerReport"));

    let back = host.replace_mcp_servers(&[declared(&url)]).await.unwrap();
    assert_eq!(back.tools.added.len(), 3);
    assert_eq!(sessions(), 2);
    assert!(host.snapshot().get("reportDesk").is_some());

    let twice = host
        .replace_mcp_servers(&[declared(&url), declared(&url)])
        .await
        .unwrap_err();
    assert_eq!(
        twice.to_string(),
        "two MCP servers are named `crm`; give each its own name"
    );
}
