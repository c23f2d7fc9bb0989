#!/usr/bin/env bash
# rename-module.sh NEWPATH: give this module the path NEWPATH, in go.mod and
# in every import of its packages. Run it in a copy of the template.
set -euo pipefail
cd "$(dirname "$0")/.."
new="${1:?usage: scripts/rename-module.sh <module path>}"
old="$(go list -m)"
go mod edit -module "$new"
find . -path ./.git -prune -o -type f \( -name '*.go' -o -name '*.sql' -o -name '*.yaml' -o -name '*.yml' \
    -o -name '*.md' -o -name Makefile -o -name Dockerfile \) -print \
  | while read -r f; do
      if grep -q --fixed-strings "$old" "$f"; then
        # The old path followed by / or a quote is an import of this module.
        sed -i.bak -e "s#${old}/#${new}/#g" -e "s#\"${old}\"#\"${new}\"#g" "$f" && rm -f "$f.bak"
      fi
    done
echo "module $old is now $new"
