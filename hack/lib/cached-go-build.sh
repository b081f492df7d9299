# Sourced by hack/{prometheus,volcano,kueue,helm}/build.sh: a build from a Go module pinned in
# the calling script's go.mod, cached in $MSOP_CACHE_DIR (default <repo>/.cache)/<name>/
# bin-<hash of the inputs>. The caller sets `here` (its directory) and defines
# `have_all DIR` (true when DIR holds every output), then:
#   cached_build_begin NAME WHAT [EXTRA_INPUT...]
#       on a cache hit prints the directory and exits 0; otherwise checks for Go, sets
#       `out`, `tmp` (an empty work directory, removed on exit) and `start`, says what
#       it builds, and changes to $here
#   ... builds into "$tmp" ...
#   cached_build_end
#       checks have_all "$tmp", moves it to $out, says how long it took, prints $out
# The inputs hashed: go.mod, go.sum, build.sh, this file and EXTRA_INPUT.

cached_build_begin() {
  local name=$1 what=$2; shift 2
  local repo key
  repo=$(cd "$here/../.." && pwd)
  key=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" "${BASH_SOURCE[0]}" "$@" \
        | sha256sum | cut -c1-16)
  out="${MSOP_CACHE_DIR:-$repo/.cache}/$name/bin-$key"
  if have_all "$out"; then echo "$out"; exit 0; fi
  command -v go >/dev/null || { echo "build.sh: Go is required to build $what" >&2; exit 1; }
  tmp="$out.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s)
  echo "build.sh: building $what into $out" >&2
  cd "$here"
}

cached_build_end() {
  chmod -R u+w "$tmp"
  have_all "$tmp" || { echo "build.sh: the build did not produce every output" >&2; exit 1; }
  rm -rf "$out"; mv "$tmp" "$out"
  echo "build.sh: built in $(( $(date +%s) - start ))s" >&2
  echo "$out"
}
