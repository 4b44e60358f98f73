//! Host bindings generated from `wit/skill@0.1.0`.

wasmtime::component::bindgen!({
    path: "../wit/skill@0.1.0",
    world: "skill",
    // `call-tool` awaits tools that do I/O; `trappable` lets the host end an
    // invocation (a limit hit) from inside an import.
    imports: { default: async | trappable },
    exports: { default: async },
});
