# Sourced by a build script: `go build -v` with a progress line and an estimate of the time
# left, for the builds that take minutes on a cold cache.
#
#   go_build_progress LABEL GO_BUILD_ARGS...
#       counts the packages the build depends on (`go list -deps`), runs
#       `go build -v GO_BUILD_ARGS...` and, every 30 s, says on stderr how many packages it
#       has compiled and about how long the rest will take at the rate so far (the links
#       come after that). Go's own messages (errors, downloads) pass through unchanged; the
#       exit status is go build's.
# Not part of the build's cache key: it changes what is printed, never what is built.

go_build_progress() {
  local label=$1; shift
  local -; set -o pipefail
  local pkgs=() a
  # The package patterns are the arguments after the flags (every flag here is -x or -x=v,
  # or -o/-ldflags/-tags/... followed by its value).
  local skip=0
  for a in "$@"; do
    if ((skip)); then skip=0; continue; fi
    case $a in
      -o|-ldflags|-gcflags|-tags|-mod|-p) skip=1 ;;
      -*) ;;
      *) pkgs+=("$a") ;;
    esac
  done
  local total
  total=$(go list -mod=readonly -deps "${pkgs[@]}" | wc -l) || total=0
  local t0=$SECONDS last=$SECONDS n=0 line el left rc=0
  echo "$label: compiling $total packages (progress every 30 s)" >&2
  go build -v "$@" 2>&1 | while IFS= read -r line; do
    # `go build -v` names each package it compiles on a line of its own; anything else
    # (an error, "# pkg" headers, "go: downloading ...") has a space in it.
    if [[ $line =~ ^[^[:space:]#]+$ ]]; then
      n=$((n + 1))
      if ((SECONDS - last >= 30 && total > n)); then
        last=$SECONDS el=$((SECONDS - t0))
        left=$((el * (total - n) / n))
        printf '%s: %d/%d packages compiled (%d%%) in %dm%02ds, about %dm%02ds left, then linking\n' \
          "$label" "$n" "$total" $((100 * n / total)) $((el / 60)) $((el % 60)) \
          $((left / 60)) $((left % 60)) >&2
      fi
    else
      printf '%s\n' "$line" >&2
    fi
  done || rc=$?
  ((rc == 0)) || return "$rc"
  echo "$label: compiled in $((SECONDS - t0))s (with the links)" >&2
}
