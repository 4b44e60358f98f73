#!/usr/bin/env bash
# Builds the Python skills and test guests into components with componentize-py:
#
#   skill-plugins/python/skills/<skill>/app.py       ->  <out>/skills/<skill>.wasm
#   skill-plugins/python/test-guests/<guest>/app.py  ->  <out>/fixtures/<guest>.wasm
#
# Usage: skill-plugins/python/build.sh [--out DIR]   (default: skill-plugins/target/python)
#
# Each component bundles CPython (about 18 MB) and compiles in seconds, so
# they are not committed, nor in skills/ (every host would compile them at
# start): CI builds them and runs `cargo test -- --ignored python::` on them.
# componentize-py comes from PyPI, pinned, into a virtualenv under
# skill-plugins/target/. The components are signed with the demo key, as
# build.sh signs the Rust ones; its output is not byte-identical across
# builds (componentize-py's is not).
set -euo pipefail

python_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
plugins=$(dirname "$python_dir")
repo=$(dirname "$plugins")
componentize_py_version=0.25.1

say() { printf '==> %s\n' "$*"; }
die() { printf 'python/build.sh: %s\n' "$*" >&2; exit 1; }

out=$plugins/target/python
case "${1:-}" in
    "") ;;
    --out) [[ -n ${2:-} ]] || die "--out needs a directory"; out=$2 ;;
    -h | --help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
esac

venv=$plugins/target/componentize-py-$componentize_py_version
componentize_py=$venv/bin/componentize-py
if [[ ! -x $componentize_py ]]; then
    say "installing componentize-py $componentize_py_version from PyPI into $venv"
    command -v python3 >/dev/null || die "python3 is needed to install componentize-py"
    python3 -m venv "$venv" || die "python3 -m venv failed (on Debian: apt-get install python3-venv)"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$componentize_py_version"
fi

say "building Python skills with $("$componentize_py" --version)"
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
built=()
for app in "$python_dir"/skills/*/app.py "$python_dir"/test-guests/*/app.py; do
    [[ -f $app ]] || continue
    dir=$(dirname "$app")
    case $dir in
        "$python_dir"/skills/*) file=skills/$(basename "$dir").wasm ;;
        *) file=fixtures/$(basename "$dir").wasm ;;
    esac
    mkdir -p "$(dirname "$staging/$file")"
    # Built from a copy: componentize-py leaves __pycache__ beside the
    # sources it runs. The SDK first, then the skill's own files (its `app`).
    sources=$staging/sources/$(basename "$dir")
    mkdir -p "$sources/sdk"
    cp "$python_dir/skillhost_skill.py" "$sources/sdk/"
    cp -r "$dir" "$sources/app"
    "$componentize_py" --quiet --wit-path "$repo/wit/skill@0.1.0" --world skill componentize \
        --python-path "$sources/sdk" --python-path "$sources/app" app --output "$staging/$file"
    built+=("$file")
done

say "signing with the demo key (keys/demo-signing.key)"
cargo build --quiet --locked --manifest-path "$repo/Cargo.toml" --bin skillhost
skillhost=${CARGO_TARGET_DIR:-$repo/target}/debug/skillhost
for file in "${built[@]}"; do
    "$skillhost" sign "$staging/$file" --key "$repo/keys/demo-signing.key" >/dev/null
    mkdir -p "$(dirname "$out/$file")"
    # Renamed into place: a host watching the directory never sees half a file.
    cp "$staging/$file" "$(dirname "$out/$file")/.$(basename "$file").tmp"
    mv -f "$(dirname "$out/$file")/.$(basename "$file").tmp" "$out/$file"
    printf '  %-40s %9d bytes\n' "$out/$file" "$(stat -c %s "$out/$file")"
done
