#!/usr/bin/env bash
# rename-module.sh NEWPATH: give this module the path NEWPATH, in go.mod and
# in every import of its packages. Run it in a copy of the template.
set -euo pipefail
cd "$(dirname "$0")/.."
new="${1:?usage: scripts/rename-module.sh <module path>}"
old="$(go list -m)"
go mod edit -module "$new"
git ls-files -co --exclude-standard -- '*.go' '*.sql' '*.yaml' '*.yml' 'Makefile' 'Dockerfile' '*.md' 2>/dev/null \
  | xargs grep -l --fixed-strings "$old" 2>/dev/null \
  | while read -r f; do
      # The old path followed by / or a quote is an import of this module.
      sed -i.bak -e "s#${old}/#${new}/#g" -e "s#\"${old}\"#\"${new}\"#g" "$f" && rm -f "$f.bak"
    done
echo "module $old is now $new"
