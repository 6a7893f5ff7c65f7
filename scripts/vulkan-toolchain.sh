#!/usr/bin/env bash
# A Vulkan build toolchain for llama.cpp in a private folder, with nothing installed system-wide.
#
# llama.cpp b11312 needs Vulkan headers with VK_EXT_layer_settings (VK_HEADER_VERSION >= 275); Debian 12 ships 239.
# This script fetches, with `apt-get download` and apt lists of its own (the system's sources are not touched):
#   from Debian 13 (trixie):    libvulkan-dev (headers 1.4.x), spirv-headers
#   from Debian 12 (bookworm):  libvulkan1 (the loader, 1.3.239), glslc, libshaderc1 (the shader compiler)
# Everything that runs comes from Debian 12, so it runs on glibc >= 2.36 (Debian 12+, Ubuntu 24.04); trixie's loader
# needs glibc 2.38. llama.cpp's Vulkan backend loads its functions at run time (VULKAN_HPP_DISPATCH_LOADER_DYNAMIC),
# so the older loader serves the newer headers.
# and unpacks them with `dpkg -x` into PREFIX/root, with PREFIX/bin/glslc a wrapper that finds its library.
# llamalab's Builder picks the prefix up by itself for `devices.backend = "vulkan"` (docs/vulkan-rocm.md).
#
#   scripts/vulkan-toolchain.sh                  fetch (once; cached) and unpack; prints the prefix
#   scripts/vulkan-toolchain.sh --debs DIR       also copy the toolchain .debs to DIR (to carry them to an
#                                                offline machine); with --gl, also the GL/EGL/loader libraries
#                                                an NVIDIA Vulkan driver needs, into DIR/gl
#   scripts/vulkan-toolchain.sh --from DIR       offline: unpack the .debs in DIR (no network, no apt)
#   scripts/vulkan-toolchain.sh --check          exit 0 when the prefix is complete, 1 otherwise (nothing fetched)
#
# PREFIX: $LLAMALAB_VULKAN_PREFIX, else $LLAMALAB_HOME/toolchains/vulkan, else ~/.cache/llamalab/toolchains/vulkan.
# The Debian archive is the one this machine's apt sources use; elsewhere set DEBIAN_MIRROR to a Debian mirror URI.
set -euo pipefail

RECIPE=2  # bump when the package list changes: a prefix of another recipe is made anew
TRIXIE_PKGS="libvulkan-dev spirv-headers"
BOOKWORM_PKGS="libvulkan1 glslc libshaderc1"
GL_PKGS="libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2"  # from bookworm, for --gl (NVIDIA's driver needs them)

home=${LLAMALAB_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/llamalab}
PREFIX=${LLAMALAB_VULKAN_PREFIX:-$home/toolchains/vulkan}
debs_out="" from="" gl=0 check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --debs) debs_out=${2:?--debs DIR}; shift 2 ;;
    --from) from=${2:?--from DIR}; shift 2 ;;
    --gl) gl=1; shift ;;
    --check) check=1; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "vulkan-toolchain: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
case "$arch" in
  amd64|x86_64) arch=amd64 triplet=x86_64-linux-gnu ;;
  arm64|aarch64) arch=arm64 triplet=aarch64-linux-gnu ;;
  *) echo "vulkan-toolchain: no recipe for architecture $arch" >&2; exit 1 ;;
esac
root=$PREFIX/root
marker=$PREFIX/toolchain.json

complete() {
  [ -f "$marker" ] && grep -q "\"recipe\": $RECIPE," "$marker" && [ -f "$root/usr/include/vulkan/vulkan_core.h" ] && [ -x "$PREFIX/bin/glslc" ] &&
    [ -e "$root/usr/lib/$triplet/libvulkan.so" ] && [ -f "$root/usr/include/spirv/unified1/spirv.hpp" ]
}

if [ "$check" = 1 ]; then complete && exit 0 || exit 1; fi

need() { command -v "$1" >/dev/null || { echo "vulkan-toolchain: $1 is needed ($2)" >&2; exit 1; }; }
need dpkg "Debian/Ubuntu's dpkg unpacks the packages"

unpack() {  # unpack every .deb in $1 (toolchain packages only: not DIR/gl) into a fresh root
  local src=$1 tmp
  tmp=$(mktemp -d "$PREFIX/.root.XXXXXX")
  for f in "$src"/*.deb; do dpkg -x "$f" "$tmp"; done
  rm -rf "$root" && mv "$tmp" "$root"
  mkdir -p "$PREFIX/bin"
  # glslc finds libshaderc through its wrapper, not through the caller's LD_LIBRARY_PATH
  cat > "$PREFIX/bin/glslc" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$root/usr/lib/$triplet\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$root/usr/bin/glslc" "\$@"
EOF
  chmod +x "$PREFIX/bin/glslc"
  "$PREFIX/bin/glslc" --version >/dev/null || { echo "vulkan-toolchain: the unpacked glslc does not run here" >&2; exit 1; }
  local hv
  hv=$(sed -n 's/^#define VK_HEADER_VERSION \([0-9]*\).*/\1/p' "$root/usr/include/vulkan/vulkan_core.h")
  printf '{"recipe": %s, "prefix": "%s", "root": "%s", "vk_header_version": %s, "debs": [%s]}\n' "$RECIPE" "$PREFIX" "$root" "${hv:-null}" \
    "$(cd "$src" && ls -1 *.deb | sed 's/.*/"&"/' | paste -sd, -)" > "$marker"
}

mkdir -p "$PREFIX"
exec 9> "$PREFIX/.lock"
flock 9  # two callers (CI, a user, a test) never fetch or unpack at once

if [ -n "$from" ]; then
  ls "$from"/*.deb >/dev/null 2>&1 || { echo "vulkan-toolchain: no .deb files in $from" >&2; exit 1; }
  complete && cmp -s <(ls -1 "$from"/*.deb | xargs -n1 basename) <(ls -1 "$PREFIX/debs" 2>/dev/null) || {
    mkdir -p "$PREFIX/debs" && rm -f "$PREFIX/debs"/*.deb && cp "$from"/*.deb "$PREFIX/debs/"
    unpack "$PREFIX/debs"
  }
  echo "$PREFIX"
  exit 0
fi

fetch_gl=$([ "$gl" = 1 ] && [ -n "$debs_out" ] && [ ! -f "$PREFIX/debs-gl/.done" ] && echo 1 || echo 0)
if ! complete || [ "$fetch_gl" = 1 ]; then
  need apt-get "the packages are fetched with apt-get download"
  mirror=${DEBIAN_MIRROR:-}
  if [ -z "$mirror" ]; then  # the Debian archive this machine's apt already uses (deb822 or one-line sources)
    mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '
      /^URIs:/ {u=$2} /^Suites:/ {for (i=2;i<=NF;i++) if ($i ~ /^(bookworm|trixie|sid|testing|stable)$/ && u != "") {print u; exit}}')
  fi
  if [ -z "$mirror" ]; then
    mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '$1=="deb" {for (i=2;i<=NF;i++) if ($i !~ /^\[/ && $i ~ /:\/\//) {if ($(i+1) ~ /^(bookworm|trixie|sid|testing|stable)$/) {print $i; exit}; break}}')
  fi
  if [ -z "$mirror" ]; then
    echo "vulkan-toolchain: this machine's apt sources name no Debian archive; set DEBIAN_MIRROR to a Debian mirror's URI" >&2
    echo "  (or, on Ubuntu >= 24.04 / Debian >= 13: sudo apt-get install libvulkan-dev glslc spirv-headers)" >&2
    exit 1
  fi
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$keyring" ] || { echo "vulkan-toolchain: $keyring is missing (package debian-archive-keyring)" >&2; exit 1; }
  apt_dir=$PREFIX/apt
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/parts"
  printf 'deb [arch=%s signed-by=%s] %s trixie main\ndeb [arch=%s signed-by=%s] %s bookworm main\n' \
    "$arch" "$keyring" "$mirror" "$arch" "$keyring" "$mirror" > "$apt_dir/sources.list"
  o=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/parts"
     -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o "Dir::Etc::Preferences=/dev/null"
     -o "Dir::Etc::PreferencesParts=$apt_dir/parts" -o "APT::Architecture=$arch" -o "APT::Architectures=$arch"
     -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
  # lists are refreshed when older than a day (a cached prefix never needs them)
  if [ -z "$(find "$apt_dir/lists" -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
    apt-get -qq "${o[@]}" update
  fi
  dl=$PREFIX/.download
  rm -rf "$dl" && mkdir -p "$dl"
  if ! complete; then
    pkgs=()
    for p in $TRIXIE_PKGS; do pkgs+=("$p/trixie"); done
    for p in $BOOKWORM_PKGS; do pkgs+=("$p/bookworm"); done
    (cd "$dl" && apt-get -qq "${o[@]}" download "${pkgs[@]}")
    rm -rf "$PREFIX/debs" && mv "$dl" "$PREFIX/debs"
    unpack "$PREFIX/debs"
  fi
  if [ "$fetch_gl" = 1 ]; then
    mkdir -p "$dl" && gls=()
    for p in $GL_PKGS; do gls+=("$p/bookworm"); done
    (cd "$dl" && apt-get -qq "${o[@]}" download "${gls[@]}")
    rm -rf "$PREFIX/debs-gl" && mv "$dl" "$PREFIX/debs-gl" && touch "$PREFIX/debs-gl/.done"
  fi
  rm -rf "$dl"
fi

if [ -n "$debs_out" ]; then
  mkdir -p "$debs_out"
  cp "$PREFIX/debs"/*.deb "$debs_out/"
  if [ "$gl" = 1 ]; then mkdir -p "$debs_out/gl" && cp "$PREFIX/debs-gl"/*.deb "$debs_out/gl/"; fi
fi
echo "$PREFIX"
