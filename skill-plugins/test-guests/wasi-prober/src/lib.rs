//! Imports WASI filesystem, environment and sockets, and reports what the
//! host granted: the host links WASI with an empty context, so the answer
//! must be "nothing".

use skillhost_skill_sdk::{Outcome, Skill, Value, json};

mod bindings {
    wit_bindgen::generate!({ path: "../wasi-wit", world: "prober", generate_all });
}

use bindings::wasi::cli::{environment, stdout};
use bindings::wasi::filesystem::preopens;
use bindings::wasi::sockets::{instance_network, network, tcp_create_socket};

fn skill() -> Skill {
    Skill::new("wasiProber")
        .description("Test guest: reports which WASI capabilities it was granted.")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({ "type": "object" }))
}

/// Tries to open a TCP connection to 127.0.0.1:80 and says how far it got.
fn tcp_probe() -> String {
    let socket = match tcp_create_socket::create_tcp_socket(network::IpAddressFamily::Ipv4) {
        Ok(socket) => socket,
        Err(error) => return format!("create refused: {error:?}"),
    };
    let address = network::IpSocketAddress::Ipv4(network::Ipv4SocketAddress {
        port: 80,
        address: (127, 0, 0, 1),
    });
    match socket.start_connect(&instance_network::instance_network(), address) {
        Ok(()) => "connect started".to_owned(),
        Err(error) => format!("connect refused: {error:?}"),
    }
}

fn run(_: Value) -> Result<Outcome, String> {
    let directories: Vec<String> = preopens::get_directories()
        .into_iter()
        .map(|(_, path)| path)
        .collect();
    let environment: Vec<String> = environment::get_environment()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    let written = stdout::get_stdout().blocking_write_and_flush(b"hello from the prober's stdout\n");
    Ok(Outcome::done(json!({
        "preopened_directories": directories,
        "environment": environment,
        "arguments": environment::get_arguments(),
        "tcp": tcp_probe(),
        "stdout_written": written.is_ok(),
    })))
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
