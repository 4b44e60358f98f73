//! The tools of an MCP server, on a real server on loopback: listed across
//! pages, called in the session, errors kept apart, a forgotten session
//! renewed, and a declaration that does not fit the server refused at start.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use skillhost::tools::http::Forwarded;
use skillhost::tools::mcp::{McpServerConfig, connect};
use skillhost::tools::{Access, ToolCaller, ToolContext, ToolError, ToolRegistry};

use crate::support::mcp::McpServer;

fn declared(url: &str) -> McpServerConfig {
    McpServerConfig {
        name: "crm".into(),
        url: url.into(),
        headers: BTreeMap::new(),
        // risky.tool is not a name a model can call: it is left out.
        tools: Some(vec![
            "lookupCustomer".into(),
            "updateCustomer".into(),
            "customerReport".into(),
        ]),
        read: vec!["lookupCustomer".into(), "customerReport".into()],
        forward_headers: Vec::new(),
        timeout_secs: None,
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
