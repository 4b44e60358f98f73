#!/usr/bin/env bash
# Builds the skills and test guests written in Python and JavaScript into
# components, with componentize-py and componentize-js:
#
#   skill-plugins/{python,js}/skills/<skill>/app.{py,js}       ->  <out>/skills/<skill>.wasm
#   skill-plugins/{python,js}/test-guests/<guest>/app.{py,js}  ->  <out>/fixtures/<guest>.wasm
#   `skillhost new newPython --lang python` (and js)            ->  <out>/scaffolds/<name>.wasm
#
# Usage: skill-plugins/build-interpreted.sh [--out DIR]
#        (default: skill-plugins/target/interpreted)
#
# Each component bundles an interpreter (CPython: ~19 MB; SpiderMonkey:
# ~12 MB) and compiles in seconds, so they are not committed, nor in skills/
# (every host would compile them at start): CI builds them and runs
# `cargo test --test integration -- --ignored` on them. The tools come
# pinned from PyPI and npm, into skill-plugins/target/. The components are
# signed with the demo key, as build.sh signs the Rust ones; the output is
# not byte-identical across builds (the tools' is not).
set -euo pipefail

plugins=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$plugins")
componentize_py_version=0.25.1
componentize_js_version=0.23.0

say() { printf '==> %s\n' "$*"; }
die() { printf 'build-interpreted.sh: %s\n' "$*" >&2; exit 1; }

out=$plugins/target/interpreted
case "${1:-}" in
    "") ;;
    --out) [[ -n ${2:-} ]] || die "--out needs a directory"; out=$2 ;;
    -h | --help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
esac

# --- tools --------------------------------------------------------------------

python_tools=$plugins/target/componentize-py-$componentize_py_version
componentize_py=$python_tools/bin/componentize-py
if [[ ! -x $componentize_py ]]; then
    say "installing componentize-py $componentize_py_version from PyPI into $python_tools"
    command -v python3 >/dev/null || die "python3 is needed to install componentize-py"
    python3 -m venv "$python_tools" || die "python3 -m venv failed (on Debian: apt-get install python3-venv)"
    "$python_tools/bin/pip" install --quiet --disable-pip-version-check \
        "componentize-py==$componentize_py_version"
fi

js_tools=$plugins/target/componentize-js-$componentize_js_version
componentize_js=$js_tools/node_modules/.bin/componentize-js
if [[ ! -x $componentize_js ]]; then
    say "installing componentize-js $componentize_js_version from npm into $js_tools"
    command -v npm >/dev/null || die "node and npm are needed to install componentize-js"
    npm install --silent --no-audit --no-fund --prefix "$js_tools" \
        "@bytecodealliance/componentize-js@$componentize_js_version"
fi

# --- build --------------------------------------------------------------------

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
wit=$repo/wit/skill@0.1.0

# Builds the app in $1 (a copy: the tools leave caches beside the sources
# they run), its language's SDK beside it, into $staging/$2.
componentize() {
    local dir=$1 file=$2 sources
    sources=$staging/sources/$(basename "$dir")
    mkdir -p "$sources" "$(dirname "$staging/$file")"
    case $dir in
        "$plugins"/python/*)
            cp -r "$dir" "$sources/app"
            mkdir -p "$sources/sdk"
            cp "$plugins/python/skillhost_skill.py" "$sources/sdk/"
            "$componentize_py" --quiet --wit-path "$wit" --world skill componentize \
                --python-path "$sources/sdk" --python-path "$sources/app" app \
                --output "$staging/$file"
            ;;
        "$plugins"/js/*)
            cp -r "$dir/." "$sources/"
            cp "$plugins/js/skillhost_skill.js" "$sources/"
            # A skill reaches nothing but its tools: no wasi:http, which the
            # host does not link.
            "$componentize_js" "$sources/app.js" --wit "$wit" --world-name skill \
                --disable http fetch-event --out "$staging/$file" >/dev/null
            ;;
    esac
}

# skillhost first: it signs, and writes the skills `skillhost new` starts
# authors with, built here as they are told to build them.
cargo build --quiet --locked --manifest-path "$repo/Cargo.toml" --bin skillhost
skillhost=${CARGO_TARGET_DIR:-$repo/target}/debug/skillhost

built=()
mkdir -p "$staging/scaffolds"
# The build command `skillhost new` prints, run as printed but for where the
# tool is (pinned here); its install line must name the version pinned here.
for lang in python js; do
    name=new${lang^}
    case $lang in
        python) pinned="componentize-py==$componentize_py_version"
                tool="componentize-py" here="$(printf %q "$componentize_py") --quiet" ;;
        js) pinned="componentize-js@$componentize_js_version"
            tool="npx componentize-js" here=$(printf %q "$componentize_js") ;;
    esac
    told=$(cd "$staging/scaffolds" && "$skillhost" new "$name" --lang "$lang" --dir "$staging/new/$name")
    grep -qF "$pinned" <<<"$told" || die "skillhost new does not tell to install $pinned: $told"
    build=$(grep -m1 "^  $tool " <<<"$told") || die "skillhost new tells no $tool command: $told"
    say "building scaffolds/$name.wasm as skillhost new --lang $lang tells"
    (cd "$staging/scaffolds" && eval "$here ${build#"  $tool "}") >/dev/null
    built+=("scaffolds/$name.wasm")
done
for app in "$plugins"/{python,js}/{skills,test-guests}/*/app.{py,js}; do
    [[ -f $app ]] || continue
    dir=$(dirname "$app")
    case $dir in
        */skills/*) file=skills/$(basename "$dir").wasm ;;
        *) file=fixtures/$(basename "$dir").wasm ;;
    esac
    say "building $file from ${dir#"$plugins"/}"
    componentize "$dir" "$file"
    built+=("$file")
done

say "signing with the demo key (keys/demo-signing.key)"
for file in "${built[@]}"; do
    "$skillhost" sign "$staging/$file" --key "$repo/keys/demo-signing.key" >/dev/null
    mkdir -p "$(dirname "$out/$file")"
    # Renamed into place: a host watching the directory never sees half a file.
    cp "$staging/$file" "$(dirname "$out/$file")/.$(basename "$file").tmp"
    mv -f "$(dirname "$out/$file")/.$(basename "$file").tmp" "$out/$file"
    printf '  %-28s %9d bytes\n' "$file" "$(stat -c %s "$out/$file")"
done
