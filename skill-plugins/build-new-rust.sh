#!/usr/bin/env bash
# Builds the Rust skill `skillhost new --lang rust` writes, as it tells its
# author to, then runs its test case: the scaffold, the SDK copy beside it and
# `skillhost pack` of a core module are checked together, as CI runs them.
#
# Usage: skill-plugins/build-new-rust.sh
#
# The commands run are those `skillhost new` prints, with the wasm toolchain
# build.sh uses in place of `cargo` (skill-plugins/toolchain.sh); its
# dependencies come from crates.io.
set -euo pipefail

plugins=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$plugins")

say() { printf '==> %s\n' "$*"; }
die() { printf 'build-new-rust.sh: %s\n' "$*" >&2; exit 1; }

# shellcheck source=skill-plugins/toolchain.sh
source "$plugins/toolchain.sh"
pick_toolchain
[[ $wasm_target == wasm32-unknown-unknown ]] ||
    die "a Rust skill is built for wasm32-unknown-unknown; $toolchain builds for $wasm_target" \
        "(SKILLHOST_WASM_TOOLCHAIN=debian or rustup-wasm32)"

cargo build --quiet --locked --manifest-path "$repo/Cargo.toml" --bin skillhost
skillhost=${CARGO_TARGET_DIR:-$repo/target}/debug/skillhost

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/skills"
cd "$work"
told=$("$skillhost" new newRust --lang rust)
printf '%s\n' "$told"
# The line after which each command is told, less its indent.
command_of() {
    grep -m1 "^  $1 " <<<"$told" | sed 's/^  //' || die "skillhost new tells no \`$1\` command"
}
command_of "rustup target add" >/dev/null
build=$(command_of "cargo build")
pack=$(command_of "skillhost pack")

say "building newRust with $toolchain, as told: $build"
eval "$(printf '%q ' "${wasm_cargo[@]}") ${build#cargo }"
say "packing it, as told: $pack"
eval "$(printf %q "$skillhost") ${pack#skillhost }"
mv newRust.wasm skills/
"$skillhost" sign skills/newRust.wasm --key "$repo/keys/demo-signing.key"
say "running its test case"
"$skillhost" test newRust --skills skills --trust "$repo/keys/trusted" --db "$work/shop.db"
