# Picks the wasm toolchain the plugins are built with (sourced by build.sh and
# build-new-rust.sh, which define `say` and `die`): sets `toolchain`,
# `wasm_target` and `wasm_cargo`, the cargo command line to build with.
#
# In order of preference (override with SKILLHOST_WASM_TOOLCHAIN=
# rustup-wasm32 | rustup-wasip2 | debian):
#   1. rustup's wasm32-unknown-unknown target, if installed;
#   2. rustup's wasm32-wasip2 target, if installed (its components import WASI);
#   3. Debian's rustc-web (/usr/bin/rustc, with std sources) and -Zbuild-std,
#      installed with apt-get when missing. The committed files are built with it.

rustup_has_target() {
    command -v rustup >/dev/null && rustup target list --installed 2>/dev/null | grep -qx "$1"
}

debian_rust_present() {
    [[ -x /usr/bin/rustc && -x /usr/bin/cargo && -d /usr/lib/rustlib/src/rust/library ]]
}

install_debian_rust() {
    say "installing Debian's rustc-web, cargo-web and rust-web-src with apt-get"
    local sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq rustc-web cargo-web rust-web-src >/dev/null
}

pick_toolchain() {
    toolchain=${SKILLHOST_WASM_TOOLCHAIN:-}
    if [[ -z $toolchain ]]; then
        if rustup_has_target wasm32-unknown-unknown; then
            toolchain=rustup-wasm32
        elif rustup_has_target wasm32-wasip2; then
            toolchain=rustup-wasip2
        else
            toolchain=debian
        fi
    fi
    case $toolchain in
        rustup-wasm32)
            wasm_target=wasm32-unknown-unknown
            wasm_cargo=(cargo)
            ;;
        rustup-wasip2)
            wasm_target=wasm32-wasip2
            wasm_cargo=(cargo)
            ;;
        debian)
            debian_rust_present || install_debian_rust
            debian_rust_present || die "Debian's rustc-web is still missing after apt-get"
            # Debian's rustc has no wasm linker: use rustup's rust-lld. The
            # sysroot must be asked of rustup's rustc, before RUSTC changes.
            local lld_dir
            lld_dir="$(rustc --print sysroot 2>/dev/null)/lib/rustlib/x86_64-unknown-linux-gnu/bin"
            [[ -x $lld_dir/rust-lld ]] || die "rust-lld not found (looked in $lld_dir); install rustup"
            export PATH="$lld_dir:$PATH"
            wasm_target=wasm32-unknown-unknown
            # RUSTC_BOOTSTRAP lets the stable toolchain use -Zbuild-std.
            wasm_cargo=(env RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 /usr/bin/cargo
                -Zbuild-std=std,panic_abort)
            ;;
        *) die "SKILLHOST_WASM_TOOLCHAIN must be rustup-wasm32, rustup-wasip2 or debian" ;;
    esac
    local rustc_version
    if [[ $toolchain == debian ]]; then rustc_version=$(/usr/bin/rustc --version); else rustc_version=$(rustc --version); fi
    say "toolchain: $toolchain ($rustc_version), target $wasm_target"
}
