#!/usr/bin/env bash
# The system libraries MuJoCo renders with off screen (MUJOCO_GL=egl, what `--record` and
# `--gif` of a MuJoCo env use): libglvnd's EGL and OpenGL, and Mesa's EGL driver with its
# software rasterizer, so no display and no GPU are needed. `make` runs this once with the
# venv. Debian's packages, installed with apt-get when missing and this runs as root;
# otherwise it says what to install and leaves the rest of the install alone (training and
# evaluation need none of it).
set -euo pipefail

PACKAGES=(libegl1 libopengl0 libegl-mesa0 libgl1-mesa-dri)

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "install_render_libs: not a Debian system; --record of MuJoCo envs needs EGL and" \
         "Mesa (e.g. libEGL, libOpenGL, Mesa's EGL driver)" >&2
    exit 0
fi
missing=()
for package in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install_render_libs: --record of MuJoCo envs needs: sudo apt-get install" \
         "${missing[*]}" >&2
    exit 0
fi
echo "install_render_libs: installing ${missing[*]} (apt-get), for --record of MuJoCo envs"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1 || true
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
