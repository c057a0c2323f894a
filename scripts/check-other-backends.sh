#!/usr/bin/env bash
# Lints render/src/device_memory.rs for Windows (DX12) and macOS (Metal) from Linux: the
# module alone, in a throw-away crate with the workspace's lints and lock file (the whole
# workspace would need a C cross-compiler for zstd). Needs the two targets' std:
# `rustup target add x86_64-pc-windows-gnu aarch64-apple-darwin`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
crate=$(mktemp -d)
trap 'rm -rf "$crate"' EXIT
mkdir -p "$crate/src"
dependency() { sed -n "s/^$1 = /$1 = /p" Cargo.toml; }
{
    printf '[package]\nname = "device-memory-check"\nversion = "0.0.0"\nedition = "2024"\n\n'
    printf '[dependencies]\n%s\n' "$(dependency wgpu)"
    printf "\n[target.'cfg(not(any(target_vendor = \"apple\", target_arch = \"wasm32\")))'.dependencies]\n%s\n" "$(dependency ash)"
    printf "\n[target.'cfg(windows)'.dependencies]\n%s\n" "$(dependency windows)"
    printf "\n[target.'cfg(target_vendor = \"apple\")'.dependencies]\n%s\n\n" "$(dependency objc2-metal)"
    sed -n '/^\[workspace.lints/,/^\[profile/p' Cargo.toml | grep -v '^\[profile' | sed 's/^\[workspace.lints/[lints/'
} >"$crate/Cargo.toml"
printf '#[path = "%s/render/src/device_memory.rs"]\npub mod device_memory;\n' "$root" >"$crate/src/lib.rs"
cp Cargo.lock "$crate/"
for target in x86_64-pc-windows-gnu aarch64-apple-darwin; do
    echo "== $target"
    (cd "$crate" && cargo clippy --quiet --target "$target" --target-dir "$root/target/other-backends" -- -D warnings)
done
echo "device_memory.rs: clean for DX12 and Metal"
