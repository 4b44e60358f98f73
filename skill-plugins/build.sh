#!/usr/bin/env bash
# Builds every plugin in skill-plugins/ from source into a WebAssembly component:
#
#   skill-plugins/skills/<skill>/       ->  skills/<skill>.wasm
#   skill-plugins/test-guests/<guest>/  ->  tests/fixtures/<guest>.wasm
#
# Usage: skill-plugins/build.sh [--check]
#
#   --check   rebuild into a temporary directory, change nothing, and exit 1
#             listing every committed file that differs from the rebuild.
#
# Steps: pick a wasm toolchain (installing Debian's rustc-web if there is none),
# build the workspace in release for wasm, wrap each core module into a
# component with componentize/, sign it with the demo key, then install (or
# compare) the outputs.
# The output is byte-identical across checkouts, given the same toolchain.
#
# Toolchain: rustup's wasm32-unknown-unknown, else rustup's wasm32-wasip2, else
# Debian's rustc-web with -Zbuild-std (installed when missing; the committed
# files are built with it); override with SKILLHOST_WASM_TOOLCHAIN=
# rustup-wasm32 | rustup-wasip2 | debian (skill-plugins/toolchain.sh).
set -euo pipefail

plugins=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$plugins")
target_dir=$plugins/target
cargo_home=${CARGO_HOME:-$HOME/.cargo}

say() { printf '==> %s\n' "$*"; }
die() { printf 'build.sh: %s\n' "$*" >&2; exit 1; }

check=false
case "${1:-}" in
    "") ;;
    --check) check=true ;;
    -h | --help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
esac

# --- toolchain --------------------------------------------------------------

# shellcheck source=skill-plugins/toolchain.sh
source "$plugins/toolchain.sh"

# --- build --------------------------------------------------------------------

# Crates to package: "<crate dir> <output file relative to the out dir>".
list_plugins() {
    local dir
    for dir in "$plugins"/skills/*/ "$plugins"/test-guests/*/; do
        [[ -f $dir/Cargo.toml ]] || continue
        dir=${dir%/}
        case $dir in
            "$plugins"/skills/*) echo "$dir skills/$(basename "$dir").wasm" ;;
            *) echo "$dir tests/fixtures/$(basename "$dir").wasm" ;;
        esac
    done
}

# The core module cargo writes for the crate in $1.
module_path() {
    local package
    package=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$1/Cargo.toml" | head -n 1)
    [[ -n $package ]] || die "no package name in $1/Cargo.toml"
    echo "$target_dir/$wasm_target/release/${package//-/_}.wasm"
}

build_modules() {
    say "building $(list_plugins | wc -l) plugins for $wasm_target"
    # Remap the checkout and cargo home so that no absolute path of this
    # machine lands in the binaries (panic locations embed source paths).
    local flags=(--remap-path-prefix="$repo=/skillhost" --remap-path-prefix="$cargo_home=/cargo")
    (
        cd "$plugins"
        CARGO_ENCODED_RUSTFLAGS=$(IFS=$'\x1f'; echo "${flags[*]}") CARGO_TARGET_DIR=$target_dir \
            "${wasm_cargo[@]}" build --quiet --locked --release --workspace --target "$wasm_target"
    )
}

# componentize/ runs on the build machine: built with the ordinary cargo, for
# the host, in its own target directory (no wasm flags, no rustc-web).
build_componentize() {
    CARGO_TARGET_DIR=$target_dir/host cargo build --quiet --locked --release \
        --manifest-path "$plugins/componentize/Cargo.toml"
    componentize=$target_dir/host/release/componentize
}

# Writes every component under $1 (skills/..., tests/fixtures/...).
componentize_all() {
    local out=$1 dir file
    while read -r dir file; do
        mkdir -p "$(dirname "$out/$file")"
        "$componentize" "$(module_path "$dir")" "$out/$file"
    done < <(list_plugins)
}

# Signs every component under $1 in place with the committed demo key, which
# only the demo configuration trusts (keys/README.md). Ed25519 signatures are
# deterministic, so signed output is as reproducible as the unsigned build.
sign_all() {
    local out=$1 dir file
    say "signing with the demo key (keys/demo-signing.key)"
    cargo build --quiet --locked --manifest-path "$repo/Cargo.toml" --bin skillhost
    local skillhost=${CARGO_TARGET_DIR:-$repo/target}/debug/skillhost
    while read -r dir file; do
        "$skillhost" sign "$out/$file" --key "$repo/keys/demo-signing.key" >/dev/null
    done < <(list_plugins)
}

# --- install or compare -------------------------------------------------------

# Moves the components from $1 into the repository, replacing only files whose
# bytes changed; each replacement is a rename, so the host's watcher never sees
# a half-written skill.
install_outputs() {
    local staged=$1 dir file
    while read -r dir file; do
        if cmp -s "$staged/$file" "$repo/$file"; then
            printf '  %-40s %8d bytes  unchanged\n' "$file" "$(stat -c %s "$repo/$file")"
        else
            mkdir -p "$(dirname "$repo/$file")"
            local temporary
            temporary="$(dirname "$repo/$file")/.$(basename "$file").tmp"
            cp "$staged/$file" "$temporary"
            mv -f "$temporary" "$repo/$file"
            printf '  %-40s %8d bytes  updated\n' "$file" "$(stat -c %s "$repo/$file")"
        fi
    done < <(list_plugins)
}

# Exits 1 listing each committed file that differs from the rebuild in $1, is
# missing, or (in skills/) has no source to rebuild it from.
compare_outputs() {
    local rebuilt=$1 dir file committed differ=()
    while read -r dir file; do
        if [[ ! -e $repo/$file ]]; then
            differ+=("$file (missing)")
        elif ! cmp -s "$rebuilt/$file" "$repo/$file"; then
            differ+=("$file")
        fi
    done < <(list_plugins)
    for committed in "$repo"/skills/*.wasm; do
        [[ -e $committed ]] || continue
        [[ -e $rebuilt/skills/$(basename "$committed") ]] || differ+=("skills/$(basename "$committed") (no source)")
    done
    if ((${#differ[@]} == 0)); then
        say "all $(list_plugins | wc -l) components match the committed files"
        return 0
    fi
    say "these files differ from a rebuild from source:"
    printf '  %s\n' "${differ[@]}"
    say "run skill-plugins/build.sh and commit the result (byte-identical output needs" \
        "the toolchain the committed files were built with: debian, rustc-web 1.96)"
    return 1
}

main() {
    pick_toolchain
    build_modules
    build_componentize
    staging=$(mktemp -d)
    trap 'rm -rf "$staging"' EXIT
    componentize_all "$staging"
    sign_all "$staging"
    if $check; then
        compare_outputs "$staging"
    else
        install_outputs "$staging"
    fi
}

main
