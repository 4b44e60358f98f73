//! The component of an instruction-only skill, generated without a wasm
//! toolchain.
//!
//! Every export of such a skill returns a constant, so the core module is a
//! memory image plus three one-instruction functions: the manifest, the
//! instructions and `run`'s error are laid out at pack time exactly as the
//! canonical ABI lifts them, and each export returns the address of its
//! pre-filled return area. A bump allocator (`cabi_realloc`) receives `run`'s
//! input string. `wit-component` then wraps the module into a component of
//! the `skill` world, whose WIT is compiled into this binary.
//!
//! The canonical ABI layouts (wasm32) used below; every field sits at the
//! next multiple of its own alignment and a record's size is rounded up to
//! its largest alignment (checked against `wit-parser` in the tests):
//!
//! | type | layout | size, align |
//! |---|---|---|
//! | `string`, `list<T>` | pointer `u32` @0, length `u32` @4 (a list's elements contiguous, each `T`'s size apart) | 8, 4 |
//! | `bool` | `u8` (0 or 1) | 1, 1 |
//! | `test-case` | name @0, input @8, expect-tools @16, expect-contains @24 | 32, 4 |
//! | `manifest` | name @0, version @8, description @16, parameters @24, tools @32, unlocks @40, has-steps @48, test-cases @52 | 60, 4 |
//! | `result<run-outcome, string>` | case `u8` @0 (1 = err), payload @4 (the widest case, `run-outcome`, is 12 bytes) | 16, 4 |
//!
//! Results that flatten to more than one core value (all three here) are
//! returned as a pointer to a return area, so the core signatures are
//! `manifest: [] -> [i32]`, `instructions: [] -> [i32]` and
//! `run: [i32 i32] -> [i32]`.

use wasm_encoder::{
    BlockType, CodeSection, ConstExpr, DataSection, ExportKind, ExportSection, Function,
    FunctionSection, GlobalSection, GlobalType, MemorySection, MemoryType, Module, TypeSection,
    ValType,
};
use wit_component::{ComponentEncoder, StringEncoding};
use wit_parser::Resolve;

use crate::SKILL_WIT;
use crate::skills::manifest::RawManifest;

/// What `run` answers if a host ever calls it: the skill has no steps.
pub const NO_STEPS: &str = "this skill has no deterministic steps";

/// Why building the component failed. None of these depends on the skill's
/// content except [`EncodeError::TooLarge`]; the others are bugs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The skill's text is over 4 GiB.
    #[error("the skill does not fit in a 32-bit linear memory")]
    TooLarge,
    /// The WIT compiled into skillhost did not parse or embed.
    #[error("the built-in skill contract (WIT) is unusable: {0}")]
    Wit(String),
    /// The generated core module does not implement the world.
    #[error("wit-component refused the generated module: {0}")]
    Component(String),
}

/// Size and alignment of a canonical ABI value in linear memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    size: u32,
    align: u32,
}

/// `string` and `list<T>`: a pointer and a length.
const PAIR: Layout = Layout { size: 8, align: 4 };
/// The `test-case` record.
const TEST_CASE: Layout = Layout { size: 32, align: 4 };
/// The `manifest` record.
const MANIFEST: Layout = Layout { size: 60, align: 4 };
/// `result<run-outcome, string>`.
const RUN_RESULT: Layout = Layout { size: 16, align: 4 };

/// Field offsets of `test-case`, in declaration order.
const TEST_CASE_FIELDS: [u32; 4] = [0, 8, 16, 24];
/// Field offsets of `manifest`, in declaration order.
const MANIFEST_FIELDS: [u32; 8] = [0, 8, 16, 24, 32, 40, 48, 52];
/// Where the payload of `result<run-outcome, string>` starts.
const RUN_RESULT_PAYLOAD: u32 = 4;

/// Address 0 stays unused, so no pointer the guest hands out is null.
const IMAGE_START: u32 = 8;
const PAGE: u32 = 1 << 16;

/// Builds the component of an instruction-only skill whose `manifest()`
/// returns `manifest` and whose `instructions()` returns `instructions`.
/// The output depends only on the arguments: packing the same skill twice
/// gives the same bytes.
pub fn component(manifest: &RawManifest, instructions: &str) -> Result<Vec<u8>, EncodeError> {
    let module = module(manifest, instructions)?;
    componentize(&module).map_err(|e| EncodeError::Component(e.to_string()))
}

/// The core module of [`component`], naming the `skill` world in a
/// `component-type` custom section as wit-bindgen does: what
/// [`componentize`] wraps.
pub fn module(manifest: &RawManifest, instructions: &str) -> Result<Vec<u8>, EncodeError> {
    let mut module = core_module(manifest, instructions)?;
    let mut resolve = Resolve::default();
    let package = resolve
        .push_str("skill.wit", SKILL_WIT)
        .map_err(|e| EncodeError::Wit(format!("{e:#}")))?;
    let world = resolve
        .select_world(&[package], Some("skill"))
        .map_err(|e| EncodeError::Wit(format!("{e:#}")))?;
    wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)
        .map_err(|e| EncodeError::Wit(format!("{e:#}")))?;
    Ok(module)
}

/// Why a core module could not be made a component.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ComponentizeError {
    /// The bytes are no core module.
    #[error("{0}")]
    NotACoreModule(&'static str),
    /// The module does not say which world it implements.
    #[error(
        "the module names no world: it has no `component-type` custom section, which \
         wit-bindgen writes (build the skill against the guest SDK, skillhost-skill-sdk)"
    )]
    NoWorld,
    /// wit-component refused it: what it imports or exports does not fit
    /// the world it names.
    #[error("{0}")]
    Refused(String),
}

/// Wraps a core module that wit-bindgen built (a skill built with the
/// guest SDK for `wasm32-unknown-unknown`) into a component of the world
/// its `component-type` custom section names, as `wasm-tools component new`
/// does. Deterministic: the same module gives the same bytes.
pub fn componentize(module: &[u8]) -> Result<Vec<u8>, ComponentizeError> {
    if wasmparser::Parser::is_component(module) {
        return Err(ComponentizeError::NotACoreModule(
            "already a component: sign it as it is",
        ));
    }
    if !wasmparser::Parser::is_core_wasm(module) {
        return Err(ComponentizeError::NotACoreModule(
            "not a WebAssembly module: it does not start with the `\\0asm` preamble of \
             version 1",
        ));
    }
    let names_a_world = wasmparser::Parser::new(0)
        .parse_all(module)
        .any(|payload| match payload {
            Ok(wasmparser::Payload::CustomSection(section)) => {
                section.name().starts_with("component-type")
            }
            _ => false,
        });
    if !names_a_world {
        return Err(ComponentizeError::NoWorld);
    }
    ComponentEncoder::default()
        .module(module)
        .and_then(|encoder| encoder.validate(true).encode())
        .map_err(|e| ComponentizeError::Refused(format!("{e:#}")))
}

/// The return areas of the three exports, filled in the memory image.
struct ReturnAreas {
    manifest: u32,
    instructions: u32,
    run: u32,
}

/// The core module: memory image, the exports and the allocator.
fn core_module(manifest: &RawManifest, instructions: &str) -> Result<Vec<u8>, EncodeError> {
    let mut image = Image::default();
    let areas = ReturnAreas {
        manifest: image.alloc(MANIFEST)?,
        instructions: image.alloc(PAIR)?,
        run: image.alloc(RUN_RESULT)?,
    };
    image.manifest(areas.manifest, manifest)?;
    image.string(areas.instructions, instructions)?;
    // `err(string)`: case 1, then the string.
    image.put(areas.run, &[1]);
    image.string(areas.run + RUN_RESULT_PAYLOAD, NO_STEPS)?;
    let heap_start = image.end().next_multiple_of(8);
    let pages = heap_start.div_ceil(PAGE).max(1);

    let mut types = TypeSection::new();
    types.ty().function([], [ValType::I32]); // 0: manifest, instructions
    types.ty().function([ValType::I32; 2], [ValType::I32]); // 1: run
    types.ty().function([ValType::I32; 4], [ValType::I32]); // 2: cabi_realloc

    let mut functions = FunctionSection::new();
    let mut exports = ExportSection::new();
    let mut code = CodeSection::new();
    let constant_exports = [
        ("manifest", 0, areas.manifest),
        ("instructions", 0, areas.instructions),
        ("run", 1, areas.run),
    ];
    for (index, (name, ty, area)) in (0..).zip(constant_exports) {
        functions.function(ty);
        exports.export(name, ExportKind::Func, index);
        code.function(&returns_address(area));
    }
    functions.function(2);
    exports.export("cabi_realloc", ExportKind::Func, 3);
    code.function(&bump_allocator());

    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: pages.into(),
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    exports.export("memory", ExportKind::Memory, 0);

    let mut globals = GlobalSection::new();
    globals.global(
        GlobalType {
            val_type: ValType::I32,
            mutable: true,
            shared: false,
        },
        &ConstExpr::i32_const(address_operand(heap_start)),
    );

    let mut data = DataSection::new();
    data.active(
        0,
        &ConstExpr::i32_const(address_operand(IMAGE_START)),
        image.bytes.iter().copied(),
    );

    let mut module = Module::new();
    module
        .section(&types)
        .section(&functions)
        .section(&memories)
        .section(&globals)
        .section(&exports)
        .section(&code)
        .section(&data);
    Ok(module.finish())
}

/// A function whose body is `i32.const address`.
fn returns_address(address: u32) -> Function {
    let mut function = Function::new([]);
    function
        .instructions()
        .i32_const(address_operand(address))
        .end();
    function
}

/// `cabi_realloc(old_ptr, old_size, align, new_size) -> ptr`: hands out the
/// next `align`ed block from a heap after the image (global 0), growing the
/// memory as needed, and never frees. The canonical ABI only ever asks for
/// fresh blocks (`old_ptr` 0); anything else traps, as does running out of
/// memory.
fn bump_allocator() -> Function {
    const OLD_PTR: u32 = 0;
    const ALIGN: u32 = 2;
    const NEW_SIZE: u32 = 3;
    const PTR: u32 = 4;
    const END: u32 = 5;
    const PAGES: u32 = 6;
    let mut function = Function::new([(3, ValType::I32)]);
    function
        .instructions()
        // if old_ptr != 0: trap
        .local_get(OLD_PTR)
        .if_(BlockType::Empty)
        .unreachable()
        .end()
        // ptr = (heap + align - 1) & -align
        .global_get(0)
        .local_get(ALIGN)
        .i32_add()
        .i32_const(1)
        .i32_sub()
        .i32_const(0)
        .local_get(ALIGN)
        .i32_sub()
        .i32_and()
        .local_tee(PTR)
        // end = ptr + new_size; trap if that wrapped around
        .local_get(NEW_SIZE)
        .i32_add()
        .local_tee(END)
        .local_get(PTR)
        .i32_lt_u()
        .if_(BlockType::Empty)
        .unreachable()
        .end()
        .local_get(END)
        .global_set(0)
        // pages = (end - 1) / 64 KiB + 1; grow when the memory is smaller
        .local_get(END)
        .i32_const(1)
        .i32_sub()
        .i32_const(16)
        .i32_shr_u()
        .i32_const(1)
        .i32_add()
        .local_tee(PAGES)
        .memory_size(0)
        .i32_gt_u()
        .if_(BlockType::Empty)
        .local_get(PAGES)
        .memory_size(0)
        .i32_sub()
        .memory_grow(0)
        .i32_const(-1)
        .i32_eq()
        .if_(BlockType::Empty)
        .unreachable()
        .end()
        .end()
        .local_get(PTR)
        .end();
    function
}

/// An address as the operand of `i32.const` (same bits, read as signed).
fn address_operand(address: u32) -> i32 {
    address.cast_signed()
}

/// The initial contents of linear memory from [`IMAGE_START`] on, written
/// in canonical ABI layout.
#[derive(Default)]
struct Image {
    bytes: Vec<u8>,
}

impl Image {
    /// The first address past the image.
    fn end(&self) -> u32 {
        // `alloc` keeps every address within u32.
        IMAGE_START + self.bytes.len() as u32
    }

    /// Reserves a zeroed block of `layout` and returns its address.
    fn alloc(&mut self, layout: Layout) -> Result<u32, EncodeError> {
        self.alloc_bytes(layout.size as usize, layout.align)
    }

    fn alloc_bytes(&mut self, size: usize, align: u32) -> Result<u32, EncodeError> {
        let address = self.end().next_multiple_of(align);
        let end = u32::try_from(size)
            .ok()
            .and_then(|size| address.checked_add(size))
            .ok_or(EncodeError::TooLarge)?;
        self.bytes.resize((end - IMAGE_START) as usize, 0);
        Ok(address)
    }

    fn put(&mut self, address: u32, bytes: &[u8]) {
        let start = (address - IMAGE_START) as usize;
        self.bytes[start..start + bytes.len()].copy_from_slice(bytes);
    }

    /// A pointer and a length at `at` (a `string` or a `list`).
    fn pair(&mut self, at: u32, pointer: u32, length: usize) -> Result<(), EncodeError> {
        let length = u32::try_from(length).map_err(|_| EncodeError::TooLarge)?;
        self.put(at, &pointer.to_le_bytes());
        self.put(at + 4, &length.to_le_bytes());
        Ok(())
    }

    /// A `string` at `at`; its bytes go at the end of the image.
    fn string(&mut self, at: u32, text: &str) -> Result<(), EncodeError> {
        let pointer = self.alloc_bytes(text.len(), 1)?;
        self.put(pointer, text.as_bytes());
        self.pair(at, pointer, text.len())
    }

    /// A `list<T>` at `at`: an array of `element`-sized slots at the end of
    /// the image, each filled by `write`.
    fn list<T>(
        &mut self,
        at: u32,
        items: &[T],
        element: Layout,
        write: impl Fn(&mut Self, u32, &T) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        let size = (element.size as usize)
            .checked_mul(items.len())
            .ok_or(EncodeError::TooLarge)?;
        let array = self.alloc_bytes(size, element.align)?;
        for (slot, item) in (0..).zip(items) {
            write(self, array + slot * element.size, item)?;
        }
        self.pair(at, array, items.len())
    }

    fn strings(&mut self, at: u32, items: &[String]) -> Result<(), EncodeError> {
        self.list(at, items, PAIR, |image, slot, item| {
            image.string(slot, item)
        })
    }

    /// The `manifest` record at `at`.
    fn manifest(&mut self, at: u32, manifest: &RawManifest) -> Result<(), EncodeError> {
        let [
            name,
            version,
            description,
            parameters,
            tools,
            unlocks,
            has_steps,
            test_cases,
        ] = MANIFEST_FIELDS.map(|offset| at + offset);
        self.string(name, &manifest.name)?;
        self.string(version, &manifest.version)?;
        self.string(description, &manifest.description)?;
        self.string(parameters, &manifest.parameters)?;
        self.strings(tools, &manifest.tools)?;
        self.strings(unlocks, &manifest.unlocks)?;
        self.put(has_steps, &[u8::from(manifest.has_steps)]);
        self.list(
            test_cases,
            &manifest.test_cases,
            TEST_CASE,
            |image, slot, case| {
                let [name, input, expect_tools, expect_contains] =
                    TEST_CASE_FIELDS.map(|offset| slot + offset);
                image.string(name, &case.name)?;
                image.string(input, &case.input)?;
                image.strings(expect_tools, &case.expect_tools)?;
                image.strings(expect_contains, &case.expect_contains)
            },
        )
    }
}

#[cfg(test)]
mod tests {
    //! The layout constants against `wit-parser`'s own canonical ABI sizes.

    use wit_parser::{Int, SizeAlign, Type, TypeDefKind, WorldItem};

    use super::*;

    struct Wit {
        resolve: Resolve,
        sizes: SizeAlign,
    }

    impl Wit {
        fn new() -> Self {
            let mut resolve = Resolve::default();
            resolve.push_str("skill.wit", SKILL_WIT).unwrap();
            let mut sizes = SizeAlign::default();
            sizes.fill(&resolve);
            Self { resolve, sizes }
        }

        fn layout(&self, ty: &Type) -> Layout {
            Layout {
                size: self.sizes.size(ty).size_wasm32() as u32,
                align: self.sizes.align(ty).align_wasm32() as u32,
            }
        }

        /// The result type of the world's export `name`.
        fn result_of(&self, name: &str) -> Type {
            let world = self.resolve.worlds.iter().next().unwrap().1;
            world
                .exports
                .values()
                .find_map(|item| match item {
                    WorldItem::Function(function) if function.name == name => function.result,
                    _ => None,
                })
                .unwrap_or_else(|| panic!("no export `{name}` with a result"))
        }

        fn kind(&self, ty: Type) -> &TypeDefKind {
            let Type::Id(mut id) = ty else {
                panic!("{ty:?} is not a defined type")
            };
            // Follow `use`d aliases to the definition.
            while let TypeDefKind::Type(Type::Id(target)) = self.resolve.types[id].kind {
                id = target;
            }
            &self.resolve.types[id].kind
        }

        fn field_offsets(&self, record: Type) -> Vec<u32> {
            let TypeDefKind::Record(record) = self.kind(record) else {
                panic!("not a record")
            };
            self.sizes
                .field_offsets(record.fields.iter().map(|field| &field.ty))
                .into_iter()
                .map(|(offset, _)| offset.size_wasm32() as u32)
                .collect()
        }
    }

    #[test]
    fn layouts_match_the_canonical_abi_of_the_wit() {
        let wit = Wit::new();

        let manifest = wit.result_of("manifest");
        assert_eq!(wit.layout(&manifest), MANIFEST);
        assert_eq!(wit.field_offsets(manifest), MANIFEST_FIELDS);
        let TypeDefKind::Record(record) = wit.kind(manifest) else {
            panic!("manifest is not a record")
        };
        let test_cases = record.fields.last().unwrap().ty;
        let TypeDefKind::List(test_case) = *wit.kind(test_cases) else {
            panic!("test-cases is not a list")
        };
        assert_eq!(wit.layout(&test_case), TEST_CASE);
        assert_eq!(wit.field_offsets(test_case), TEST_CASE_FIELDS);

        assert_eq!(wit.layout(&wit.result_of("instructions")), PAIR);

        let run = wit.result_of("run");
        assert_eq!(wit.layout(&run), RUN_RESULT);
        let TypeDefKind::Result(result) = wit.kind(run) else {
            panic!("run does not return a result")
        };
        let payload = wit
            .sizes
            .payload_offset(Int::U8, [result.ok.as_ref(), result.err.as_ref()]);
        assert_eq!(payload.size_wasm32() as u32, RUN_RESULT_PAYLOAD);
        assert_eq!(result.err, Some(Type::String));
    }
}
