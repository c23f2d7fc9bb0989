#!/usr/bin/env bash
# rename-module.sh NEWPATH: give this module the path NEWPATH, in go.mod and
# in every import of its packages. Run it in a copy of the template.
# A nested module (a folder with a go.mod of its own, such as conformance/)
# is another module: its files, and its path wherever this module's files
# name it (go install …/conformance/cmd/idemcheck@latest), are left as they
# are.
set -euo pipefail
cd "$(dirname "$0")/.."
new="${1:?usage: scripts/rename-module.sh <module path>}"
old="$(go list -m)"
go mod edit -module "$new"
prune=(-path ./.git)
keep=()
restore=()
while read -r mod; do
  dir="$(dirname "$mod")"
  prune+=(-o -path "$dir")
  path="$(sed -n 's/^module[[:space:]]*//p' "$mod")"
  keep+=(-e "s#${path}#@@nested-${#keep[@]}@@#g")
  restore+=(-e "s#@@nested-$((${#keep[@]} - 2))@@#${path}#g")
done < <(find . -mindepth 2 -path ./.git -prune -o -name go.mod -print)
find . \( "${prune[@]}" \) -prune -o -type f \( -name '*.go' -o -name '*.sql' -o -name '*.yaml' -o -name '*.yml' \
    -o -name '*.md' -o -name Makefile -o -name Dockerfile \) -print \
  | while read -r f; do
      if grep -q --fixed-strings "$old" "$f"; then
        # The old path followed by / or a quote is an import of this module.
        sed -i.bak ${keep[@]+"${keep[@]}"} -e "s#${old}/#${new}/#g" -e "s#\"${old}\"#\"${new}\"#g" ${restore[@]+"${restore[@]}"} "$f" && rm -f "$f.bak"
      fi
    done
echo "module $old is now $new"
