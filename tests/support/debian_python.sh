#!/usr/bin/env bash
# Lays out a root with Debian SUITE's CPython 3.MINOR (its own glibc beside it) in DEST, from the
# Debian archive through apt-get with a private package list (the host's apt setup untouched),
# for running under chroot: `chroot DEST /usr/bin/python3.MINOR`. Bookworm ships only 3.11;
# trixie ships 3.13. Idempotent: an existing DEST/.complete is kept.
# Usage: debian_python.sh SUITE MINOR DEST
set -euo pipefail
suite=$1 minor=$2 dest=$3
[[ -e $dest/.complete ]] && exit 0
work=$dest.apt
rm -rf "$dest" "$work"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$dest"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" >"$work/sources.list"
touch "$work/status"
apt=(apt-get -q -o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=/nonexistent
    -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Dir::State::status="$work/status"
    -o APT::Sandbox::User=root)
"${apt[@]}" update >"$work/update.log" 2>&1 || { cat "$work/update.log" >&2; exit 1; }
cd "$work/debs"
"${apt[@]}" download "python3.$minor-minimal" "libpython3.$minor-minimal" "libpython3.$minor-stdlib" \
    libc6 zlib1g libexpat1 libgcc-s1 >"$work/download.log" 2>&1 || { cat "$work/download.log" >&2; exit 1; }
for d in ./*.deb; do dpkg -x "$d" "$dest"; done
# Merged /usr: the loader is found through /lib64.
for l in bin lib lib64; do [[ -e $dest/$l ]] || ln -s "usr/$l" "$dest/$l"; done
mkdir -p "$dest/tmp" "$dest/proc"
chroot "$dest" "/usr/bin/python3.$minor" -c 'import sys; print(sys.version)' >&2
rm -rf "$work"
touch "$dest/.complete"
