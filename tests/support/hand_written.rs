//! Skills written by hand in the component text format: hostile guests whose
//! every instruction the test chooses, with no wasm toolchain.

/// A skill whose manifest takes any object and whose `run` calls the core
/// function `$steps`, then answers `{"ok":true}`.
///
/// Its memory and allocator come from a core module of their own,
/// instantiated first, so that functions lowered from the imports (which
/// need them) can be handed to the main module.
pub struct HandWritten<'a> {
    pub name: &'a str,
    /// The tools its manifest declares.
    pub tools: &'a [&'a str],
    /// The memory's limits in pages: `"1"`, or `"1 16"` with a maximum.
    pub memory: &'a str,
    /// Component imports and the core functions lowered from them, which
    /// may name `$memory` and `$realloc`.
    pub imports: &'a str,
    /// The exports of the core instance the main module imports as
    /// `"imports"`: `(export "write" (func $write))`.
    pub lowered: &'a str,
    /// The main module's imports of those:
    /// `(import "imports" "write" (func $write (param i32)))`.
    pub main_imports: &'a str,
    /// The main module's functions: `$steps` and any it calls. Memory from
    /// 4096 on is the allocator's; what the steps write themselves goes
    /// above what the allocator hands out.
    pub steps: &'a str,
    /// Core instances beside the main one, each of a module with a memory
    /// of its own: the shape of interpreted-language guests (componentize-py
    /// has dozens of core instances), which draw more of the pool's shared
    /// totals than one instance slot brings.
    pub extra_memories: usize,
}

/// No imports, steps that do nothing.
pub const BARE: HandWritten<'static> = HandWritten {
    name: "handWritten",
    tools: &[],
    memory: "1",
    imports: "",
    lowered: "",
    main_imports: "",
    steps: "(func $steps)",
    extra_memories: 0,
};

/// `host.call-tool`, lowered as the core function `$call-tool`: (name
/// pointer, name length, arguments pointer, arguments length, where the
/// result goes).
pub const CALL_TOOL: HandWritten<'static> = HandWritten {
    imports: r#"
      (import "skillhost:skill/host@0.1.0" (instance $host
        (type $kind (enum "not-permitted" "unknown-tool" "invalid-arguments" "rejected"
          "declined" "limit-exceeded" "failed"))
        (export "tool-error-kind" (type $kind-export (eq $kind)))
        (type $tool-error (record (field "kind" $kind-export) (field "message" string)))
        (export "tool-error" (type $tool-error-export (eq $tool-error)))
        (export "call-tool" (func (param "name" string) (param "arguments" string)
          (result (result string (error $tool-error-export)))))))
      (core func $call-tool
        (canon lower (func $host "call-tool") (memory $memory) (realloc $realloc)))"#,
    lowered: r#"(export "call-tool" (func $call-tool))"#,
    main_imports: r#"(import "imports" "call-tool" (func $call-tool (param i32 i32 i32 i32 i32)))"#,
    ..BARE
};

/// WASI's stdout, lowered as the core functions `$get-stdout` (returns the
/// stream's handle) and `$write` (`blocking-write-and-flush`: handle,
/// pointer, length, where the result goes; at most 4096 bytes a call).
pub const STDOUT: HandWritten<'static> = HandWritten {
    imports: r#"
      (import "wasi:io/error@0.2.12" (instance $io-error
        (export "error" (type (sub resource)))))
      (alias export $io-error "error" (type $error))
      (import "wasi:io/streams@0.2.12" (instance $streams
        (alias outer $skill $error (type $outer-error))
        (export "error" (type $error-export (eq $outer-error)))
        (export "output-stream" (type $output-stream (sub resource)))
        (type $stream-error (variant
          (case "last-operation-failed" (own $error-export)) (case "closed")))
        (export "stream-error" (type $stream-error-export (eq $stream-error)))
        (export "[method]output-stream.blocking-write-and-flush"
          (func (param "self" (borrow $output-stream)) (param "contents" (list u8))
            (result (result (error $stream-error-export)))))))
      (alias export $streams "output-stream" (type $output-stream))
      (import "wasi:cli/stdout@0.2.12" (instance $stdout
        (alias outer $skill $output-stream (type $outer-stream))
        (export "output-stream" (type $stream-export (eq $outer-stream)))
        (export "get-stdout" (func (result (own $stream-export))))))
      (core func $get-stdout (canon lower (func $stdout "get-stdout")))
      (core func $write
        (canon lower (func $streams "[method]output-stream.blocking-write-and-flush")
          (memory $memory)))"#,
    lowered: r#"(export "get-stdout" (func $get-stdout)) (export "write" (func $write))"#,
    main_imports: r#"
      (import "imports" "get-stdout" (func $get-stdout (result i32)))
      (import "imports" "write" (func $write (param i32 i32 i32 i32)))"#,
    ..BARE
};

/// The guest's memory from offset 1024: the strings the records point at.
struct Data(Vec<u8>);

impl Data {
    /// Appends `text`; returns its pointer and length as the canonical ABI
    /// lays out a string.
    fn string(&mut self, text: &str) -> [u32; 2] {
        let at = 1024 + self.0.len() as u32;
        self.0.extend_from_slice(text.as_bytes());
        [at, text.len() as u32]
    }

    /// Appends a list of strings (4-aligned); returns its pointer and
    /// length.
    fn strings(&mut self, texts: &[&str]) -> [u32; 2] {
        let strings: Vec<[u32; 2]> = texts.iter().map(|text| self.string(text)).collect();
        self.0.resize(self.0.len().next_multiple_of(4), 0);
        let at = 1024 + self.0.len() as u32;
        self.0.extend(words(&strings.concat()));
        [at, texts.len() as u32]
    }
}

fn words(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|word| word.to_le_bytes()).collect()
}

/// `bytes` as a data segment's string.
fn escaped(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("\\{byte:02x}")).collect()
}

impl HandWritten<'_> {
    /// The component's bytes.
    pub fn build(&self) -> Vec<u8> {
        let mut data = Data(Vec::new());
        let name = data.string(self.name);
        let version = data.string("0.1.0");
        let about = data.string("A skill written by hand in the component text format.");
        let schema = data.string(r#"{"type":"object"}"#);
        let instructions = data.string("Say ok.");
        let [answer_at, answer_len] = data.string(r#"{"ok":true}"#);
        let tools = data.strings(self.tools);
        assert!(data.0.len() <= 3072, "the data stays below the allocator's");
        // manifest (at 0): four strings, tools and unlocks (an empty list),
        // has-steps, test-cases (an empty list).
        let mut manifest = words(&[name, version, about, schema, tools, [0, 0]].concat());
        manifest.extend(words(&[1, 0, 0]));
        // result<run-outcome, string> (at 80): ok, done, the answer.
        let run = words(&[0, 0, answer_at, answer_len]);
        let extra = "(core instance (instantiate $extra))\n".repeat(self.extra_memories);
        let wat = format!(
            r#"(component $skill
              (import "skillhost:skill/types@0.1.0" (instance $types
                (type $test-case (record (field "name" string) (field "input" string)
                  (field "expect-tools" (list string)) (field "expect-contains" (list string))))
                (export "test-case" (type $test-case-export (eq $test-case)))
                (type $manifest (record (field "name" string) (field "version" string)
                  (field "description" string) (field "parameters" string)
                  (field "tools" (list string)) (field "unlocks" (list string))
                  (field "has-steps" bool) (field "test-cases" (list $test-case-export))))
                (export "manifest" (type (eq $manifest)))
                (type $run-outcome (variant (case "done" string) (case "handover" string)))
                (export "run-outcome" (type (eq $run-outcome)))))
              (alias export $types "manifest" (type $manifest))
              (alias export $types "run-outcome" (type $run-outcome))
              (core module $memory-module
                (memory (export "memory") {memory})
                (global $next (mut i32) (i32.const 4096))
                (func (export "realloc") (param i32 i32 i32 i32) (result i32)
                  (local $at i32)
                  (local.set $at
                    (i32.and (i32.add (global.get $next) (i32.const 7)) (i32.const -8)))
                  (global.set $next (i32.add (local.get $at) (local.get 3)))
                  (local.get $at)))
              (core instance $memory-instance (instantiate $memory-module))
              (alias core export $memory-instance "memory" (core memory $memory))
              (alias core export $memory-instance "realloc" (core func $realloc))
              {imports}
              (core instance $imports {lowered})
              (core module $extra (memory (export "memory") 1))
              {extra}
              (core module $main
                (import "env" "memory" (memory 1))
                {main_imports}
                (func (export "manifest") (result i32) (i32.const 0))
                (func (export "instructions") (result i32) (i32.const 64))
                (func (export "run") (param i32 i32) (result i32) (call $steps) (i32.const 80))
                {steps}
                (data (i32.const 0) "{manifest}")
                (data (i32.const 64) "{instructions}")
                (data (i32.const 80) "{run}")
                (data (i32.const 1024) "{data}"))
              (core instance $main (instantiate $main
                (with "env" (instance $memory-instance))
                (with "imports" (instance $imports))))
              (func (export "manifest") (result $manifest)
                (canon lift (core func $main "manifest") (memory $memory)))
              (func (export "instructions") (result string)
                (canon lift (core func $main "instructions") (memory $memory)))
              (func (export "run") (param "input" string)
                (result (result $run-outcome (error string)))
                (canon lift (core func $main "run") (memory $memory) (realloc $realloc))))"#,
            memory = self.memory,
            imports = self.imports,
            lowered = self.lowered,
            main_imports = self.main_imports,
            steps = self.steps,
            manifest = escaped(&manifest),
            instructions = escaped(&words(&instructions)),
            run = escaped(&run),
            data = escaped(&data.0),
        );
        wat::parse_str(wat).expect("the component text parses")
    }
}

/// A data segment writing `bytes` at `at`, for [`HandWritten::steps`].
pub fn data(at: u32, bytes: &[u8]) -> String {
    format!(r#"(data (i32.const {at}) "{}")"#, escaped(bytes))
}
